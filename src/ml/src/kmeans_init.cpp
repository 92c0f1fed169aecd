// k-means initialisation (random, k-means++, k-means||), rank-independent; see kmeans.hpp.
#include <algorithm>
#include <limits>
#include <set>

#include "hpctrain/base/error.hpp"
#include "hpctrain/core/counter_rng.hpp"
#include "hpctrain/ml/kmeans.hpp"
#include "hpctrain/ml/sample_partition.hpp"
#include "hpctrain/base/vector_clones.hpp"

namespace hpctrain::ml {

namespace {

// Key domains of the counter-based RNG, so the two initialisations draw unrelated numbers.
constexpr std::uint64_t kRandomInitDomain = 0x6b6d2d72616e64ull;  // "km-rand"
constexpr std::uint64_t kPlusPlusDomain = 0x6b6d2d2b2bull;         // "km-++"
constexpr std::uint64_t kParallelDomain = 0x6b6d2d7c7cull;         // "km-||"

std::int64_t random_index(std::uint64_t seed, std::uint64_t domain, std::uint64_t draw, std::uint64_t attempt,
                          std::int64_t n) {
  return static_cast<std::int64_t>(core::counter_hash(seed, domain, draw, attempt) % static_cast<std::uint64_t>(n));
}

/// Every block's sum of the per-sample weights `w` (local samples), on every rank. One slot per
/// block, written by its owner: the all-reduce adds zeros only, so it is exact.
std::vector<double> all_block_sums(coll::Communicator& comm, const SamplePartition& part, const std::vector<double>& w) {
  std::vector<double> sums(static_cast<std::size_t>(part.total_blocks), 0.0);
  for (std::int64_t b = 0; b < part.block_count; ++b) {
    double s = 0.0;
    for (std::int64_t i = part.block_begin(b), e = i + part.block_length(b); i < e; ++i) s += w[static_cast<std::size_t>(i)];
    sums[static_cast<std::size_t>(part.first_block + b)] = s;
  }
  comm.allreduce(sums.data(), sums.size(), coll::ReduceOp::sum);
  return sums;
}

/// Global index of the sample where the running sum of the weights `w`, in global order, first
/// exceeds `target` (the last weighted sample should rounding leave target past the end).
/// Collective; `block_sums` from all_block_sums.
std::int64_t locate_weighted(coll::Communicator& comm, const SamplePartition& part, const std::vector<double>& w,
                             const std::vector<double>& block_sums, double target) {
  std::int64_t block = -1, last = -1;
  double before = 0.0, before_last = 0.0;
  for (std::int64_t b = 0; b < part.total_blocks; ++b) {
    const double s = block_sums[static_cast<std::size_t>(b)];
    if (s > 0.0) {
      if (before + s > target) {
        block = b;
        break;
      }
      last = b;
      before_last = before;
    }
    before += s;
  }
  if (block < 0) {
    block = last;
    before = before_last;
  }
  std::int64_t found = -1;
  const std::int64_t local_block = block - part.first_block;
  if (block >= 0 && local_block >= 0 && local_block < part.block_count) {
    double cum = before;
    for (std::int64_t i = part.block_begin(local_block), e = i + part.block_length(local_block); i < e; ++i) {
      const double wi = w[static_cast<std::size_t>(i)];
      if (wi <= 0.0) continue;
      found = part.first_sample + i;
      cum += wi;
      if (cum > target) break;
    }
  }
  comm.allreduce(&found, 1, coll::ReduceOp::max);
  return found;
}

std::vector<double> random_init(coll::Communicator& comm, const SamplePartition& part, const DatasetSlice& data,
                                const KMeansOptions& o) {
  std::set<std::int64_t> chosen;
  std::vector<double> centroids;
  for (std::int64_t c = 0; c < o.k; ++c) {
    std::int64_t idx = 0;
    for (std::uint64_t attempt = 0;; ++attempt) {
      idx = random_index(o.seed, kRandomInitDomain, static_cast<std::uint64_t>(c), attempt, part.total_samples);
      if (chosen.insert(idx).second) break;
    }
    const auto row = fetch_sample(comm, part, data, idx);
    centroids.insert(centroids.end(), row.begin(), row.end());
  }
  return centroids;
}

std::vector<double> plusplus_init(coll::Communicator& comm, const SamplePartition& part, const DatasetSlice& data,
                                  const KMeansOptions& o) {
  const std::int64_t d = data.features;
  std::vector<double> centroids = fetch_sample(comm, part, data, random_index(o.seed, kPlusPlusDomain, 0, 0, part.total_samples));
  std::vector<double> d2(static_cast<std::size_t>(data.rows), std::numeric_limits<double>::infinity());
  std::vector<double> widened;
  for (std::int64_t c = 1; c < o.k; ++c) {
    const double* last = centroids.data() + (c - 1) * d;
    for_each_f64_block(data, 0, data.rows, kWidenBlockRows, widened, [&](const double* x, std::int64_t at, std::int64_t n) {
      for (std::int64_t i = 0; i < n; ++i) {
        auto& v = d2[static_cast<std::size_t>(at + i)];
        v = std::min(v, squared_distance(x + i * d, last, d));
      }
    });
    // The total as the blocks' sums in global order: the same double on every rank and at any P.
    const std::vector<double> block_sums = all_block_sums(comm, part, d2);
    double total = 0.0;
    for (double b : block_sums) total += b;
    std::int64_t idx;
    if (total > 0.0) {
      const double u = core::uniform01(core::counter_hash(o.seed, kPlusPlusDomain, static_cast<std::uint64_t>(c), 1));
      idx = locate_weighted(comm, part, d2, block_sums, u * total);
    } else {
      // Fewer distinct samples than clusters: any sample (Lloyd re-seeds the empty clusters).
      idx = random_index(o.seed, kPlusPlusDomain, static_cast<std::uint64_t>(c), 2, part.total_samples);
    }
    const auto row = fetch_sample(comm, part, data, idx);
    centroids.insert(centroids.end(), row.begin(), row.end());
  }
  return centroids;
}

/// Lowers d2[i] (local samples) to the squared distance to the nearest of `centres` (m x d),
/// sum block by sum block (nearest_centroids' P-independent calls; nearest_centroids_f32's with
/// `f32_products`); where it lowers, nearest[i] becomes that centre's index plus `first_index`.
void lower_distances(const SamplePartition& part, const DatasetSlice& data, const std::vector<double>& centres,
                     std::int64_t m, bool f32_products, std::vector<double>& d2, std::vector<std::int64_t>& nearest,
                     std::int64_t first_index) {
  std::vector<std::int64_t> label(static_cast<std::size_t>(kSumBlockSamples));
  std::vector<double> dist(label.size());
  for (std::int64_t b = 0; b < part.block_count; ++b) {
    const std::int64_t first = part.block_begin(b), rows = part.block_length(b);
    if (f32_products) {
      nearest_centroids_f32(data, first, rows, centres, m, label.data(), dist.data());
    } else {
      nearest_centroids(data, first, rows, centres, m, label.data(), dist.data());
    }
    for (std::int64_t i = 0; i < rows; ++i) {
      const auto at = static_cast<std::size_t>(first + i);
      if (dist[static_cast<std::size_t>(i)] < d2[at]) {
        d2[at] = dist[static_cast<std::size_t>(i)];
        nearest[at] = first_index + label[static_cast<std::size_t>(i)];
      }
    }
  }
}

/// Collective: every rank's picked local rows (global index order = rank order), appended to
/// `rows` (n x d) on every rank; returns how many were appended.
std::int64_t gather_picked(coll::Communicator& comm, const DatasetSlice& data, const std::vector<std::int64_t>& picked,
                           std::vector<double>& rows) {
  const std::int64_t d = data.features;
  const auto p = static_cast<std::size_t>(comm.size());
  std::vector<std::int64_t> counts(p, 0);
  const auto mine = static_cast<std::int64_t>(picked.size());
  comm.allgather(&mine, counts.data(), 1, coll::DataType::i64);
  const std::int64_t most = *std::max_element(counts.begin(), counts.end());
  std::vector<double> padded(static_cast<std::size_t>(most * d), 0.0);
  for (std::size_t j = 0; j < picked.size(); ++j) data.widen_rows(picked[j], 1, padded.data() + j * static_cast<std::size_t>(d));
  std::vector<double> all(padded.size() * p);
  comm.allgather(padded.data(), all.data(), padded.size(), coll::DataType::f64);
  std::int64_t added = 0;
  for (std::size_t r = 0; r < p; ++r) {
    const auto begin = all.begin() + static_cast<std::ptrdiff_t>(r * padded.size());
    rows.insert(rows.end(), begin, begin + counts[r] * d);
    added += counts[r];
  }
  return added;
}

/// k-means++ on m weighted points (local, the same on every rank), then weighted Lloyd
/// iterations until no point changes centre (at most kLocalLloydIterations).
std::vector<double> recluster_weighted(const std::vector<double>& points, const std::vector<double>& weight,
                                       std::int64_t m, std::int64_t d, const KMeansOptions& o) {
  constexpr int kLocalLloydIterations = 30;  // Spark's LocalKMeans runs up to 30 as well
  std::vector<double> d2(static_cast<std::size_t>(m), std::numeric_limits<double>::infinity());
  std::vector<double> centres;
  auto draw = [&](std::uint64_t c, const std::vector<double>& mass) {
    double total = 0.0;
    for (std::int64_t i = 0; i < m; ++i) total += mass[static_cast<std::size_t>(i)];
    const double target = core::uniform01(core::counter_hash(o.seed, kParallelDomain, c, 0xcafe)) * total;
    double cum = 0.0;
    std::int64_t pick = m - 1;
    for (std::int64_t i = 0; i < m; ++i) {
      cum += mass[static_cast<std::size_t>(i)];
      if (cum > target && mass[static_cast<std::size_t>(i)] > 0) { pick = i; break; }
    }
    centres.insert(centres.end(), points.begin() + pick * d, points.begin() + (pick + 1) * d);
  };
  draw(0, weight);
  std::vector<double> mass(static_cast<std::size_t>(m));
  for (std::int64_t c = 1; c < o.k; ++c) {
    const double* last = centres.data() + (c - 1) * d;
    for (std::int64_t i = 0; i < m; ++i) {
      auto& v = d2[static_cast<std::size_t>(i)];
      v = std::min(v, squared_distance(points.data() + i * d, last, d));
      mass[static_cast<std::size_t>(i)] = weight[static_cast<std::size_t>(i)] * v;
    }
    draw(static_cast<std::uint64_t>(c), mass);
  }
  std::vector<std::int64_t> label(static_cast<std::size_t>(m), -1), next(label.size());
  for (int it = 0; it < kLocalLloydIterations; ++it) {
    std::vector<double> dist(label.size());
    nearest_centroids(points.data(), m, d, centres, o.k, next.data(), dist.data());
    if (next == label) break;
    label = next;
    std::vector<double> sum(centres.size(), 0.0), mass_of(static_cast<std::size_t>(o.k), 0.0);
    for (std::int64_t i = 0; i < m; ++i) {
      const auto c = label[static_cast<std::size_t>(i)];
      const double w = weight[static_cast<std::size_t>(i)];
      for (std::int64_t j = 0; j < d; ++j) sum[static_cast<std::size_t>(c * d + j)] += w * points[static_cast<std::size_t>(i * d + j)];
      mass_of[static_cast<std::size_t>(c)] += w;
    }
    for (std::int64_t c = 0; c < o.k; ++c) {
      if (mass_of[static_cast<std::size_t>(c)] <= 0) continue;  // keeps its centre
      for (std::int64_t j = 0; j < d; ++j) centres[static_cast<std::size_t>(c * d + j)] = sum[static_cast<std::size_t>(c * d + j)] / mass_of[static_cast<std::size_t>(c)];
    }
  }
  return centres;
}

/// k-means|| (Bahmani et al. 2012): one random centre, then `rounds` rounds in which every
/// sample joins the candidates independently with probability min(1, l d2 / phi) (l =
/// oversampling x k, phi = the sum of d2 over all samples, d2 the squared distance to the
/// nearest candidate); each candidate is weighted by the samples nearest to it, and the weighted
/// candidates are reclustered into k by k-means++ and Lloyd. Every draw is the counter-based RNG
/// at (seed, round, global index) and every sum is over blocks in global order, so the centres
/// are the same at any P.
std::vector<double> parallel_init(coll::Communicator& comm, const SamplePartition& part, const DatasetSlice& data,
                                  const KMeansOptions& o) {
  const std::int64_t d = data.features;
  std::vector<double> candidates = fetch_sample(comm, part, data, random_index(o.seed, kParallelDomain, 0, 0, part.total_samples));
  std::int64_t m = 1, fresh_from = 0;
  std::vector<double> d2(static_cast<std::size_t>(data.rows), std::numeric_limits<double>::infinity());
  // Each sample's nearest candidate so far, kept through the rounds (each round compares the
  // samples with its new candidates only), so the weights need no pass over all candidates.
  std::vector<std::int64_t> nearest(d2.size(), 0);
  const auto lower_to_fresh = [&] {
    const std::vector<double> fresh(candidates.begin() + fresh_from * d, candidates.end());
    lower_distances(part, data, fresh, m - fresh_from, o.f32_products, d2, nearest, fresh_from);
  };
  const double ell = o.oversampling * static_cast<double>(o.k);
  for (std::int64_t round = 1; round <= o.init_rounds; ++round) {
    lower_to_fresh();
    const std::vector<double> block_sums = all_block_sums(comm, part, d2);
    double phi = 0.0;
    for (double b : block_sums) phi += b;
    if (!(phi > 0.0)) break;  // every sample is a candidate already
    std::vector<std::int64_t> picked;
    for (std::int64_t i = 0; i < data.rows; ++i) {
      const auto g = static_cast<std::uint64_t>(part.first_sample + i);
      const double u = core::uniform01(core::counter_hash(o.seed, kParallelDomain, static_cast<std::uint64_t>(round), g));
      if (u * phi < ell * d2[static_cast<std::size_t>(i)]) picked.push_back(i);
    }
    fresh_from = m;
    m += gather_picked(comm, data, picked, candidates);
  }
  // Weights: the samples nearest to each candidate (exact int64 counts), once the last
  // round's candidates are compared too.
  if (fresh_from < m) lower_to_fresh();
  std::vector<std::int64_t> count(static_cast<std::size_t>(m), 0);
  for (auto c : nearest) ++count[static_cast<std::size_t>(c)];
  comm.allreduce(count.data(), count.size(), coll::ReduceOp::sum);
  if (m <= o.k) {  // too few candidates: all of them, then random samples (Lloyd re-seeds duplicates)
    for (std::int64_t c = m; c < o.k; ++c) {
      const auto row = fetch_sample(comm, part, data, random_index(o.seed, kParallelDomain, static_cast<std::uint64_t>(c), 1, part.total_samples));
      candidates.insert(candidates.end(), row.begin(), row.end());
    }
    candidates.resize(static_cast<std::size_t>(o.k * d));
    return candidates;
  }
  const std::vector<double> weight(count.begin(), count.end());
  return recluster_weighted(candidates, weight, m, d, o);
}

}  // namespace

HPCTRAIN_VECTOR_CLONES
double squared_distance(const double* a, const double* b, std::int64_t d) noexcept {
  // Eight running sums (lane l takes j = l mod 8), added in a fixed order at the end: the
  // compiler vectorises it without reassociating, and the bits depend on the data alone.
  constexpr std::int64_t kLanes = 8;
  double lane[kLanes] = {};
  std::int64_t j = 0;
  for (; j + kLanes <= d; j += kLanes) {
#pragma GCC unroll 8  // the lanes stay in registers (otherwise each pass stores them to the stack)
    for (std::int64_t l = 0; l < kLanes; ++l) {
      const double t = a[j + l] - b[j + l];
      lane[l] += t * t;
    }
  }
  for (std::int64_t l = 0; j < d; ++j, ++l) {
    const double t = a[j] - b[j];
    lane[l] += t * t;
  }
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

std::vector<double> fetch_sample(coll::Communicator& comm, const SamplePartition& part, const DatasetSlice& data,
                                 std::int64_t index) {
  const int owner = SamplePartition::owner_of(part.total_samples, index, comm.size());
  std::vector<double> row(static_cast<std::size_t>(data.features), 0.0);
  if (comm.rank() == owner) data.widen_rows(index - part.first_sample, 1, row.data());
  comm.broadcast(row.data(), row.size(), coll::DataType::f64, owner);
  return row;
}

std::vector<double> initial_centroids(coll::Communicator& comm, const SamplePartition& part,
                                      const DatasetSlice& data, const KMeansOptions& options) {
  switch (options.init) {
    case KMeansInit::random: return random_init(comm, part, data, options);
    case KMeansInit::plusplus: return plusplus_init(comm, part, data, options);
    case KMeansInit::parallel: return parallel_init(comm, part, data, options);
  }
  HPCTRAIN_FAIL("k-means: unknown initialisation");
}

}  // namespace hpctrain::ml
