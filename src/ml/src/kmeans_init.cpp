// k-means initialisation (random and k-means++), rank-independent; see kmeans.hpp.
#include <algorithm>
#include <limits>
#include <set>

#include "hpctrain/collectives/error.hpp"
#include "hpctrain/core/counter_rng.hpp"
#include "hpctrain/ml/kmeans.hpp"

namespace hpctrain::ml {

namespace {

// Key domains of the counter-based RNG, so the two initialisations draw unrelated numbers.
constexpr std::uint64_t kRandomInitDomain = 0x6b6d2d72616e64ull;  // "km-rand"
constexpr std::uint64_t kPlusPlusDomain = 0x6b6d2d2b2bull;         // "km-++"

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
  for (std::int64_t c = 1; c < o.k; ++c) {
    const double* last = centroids.data() + (c - 1) * d;
    for (std::int64_t i = 0; i < data.rows; ++i) {
      d2[static_cast<std::size_t>(i)] = std::min(d2[static_cast<std::size_t>(i)], squared_distance(data.row(i), last, d));
    }
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

}  // namespace

double squared_distance(const double* a, const double* b, std::int64_t d) noexcept {
  // Eight running sums (lane l takes j = l mod 8), added in a fixed order at the end: the
  // compiler vectorises it without reassociating, and the bits depend on the data alone.
  constexpr std::int64_t kLanes = 8;
  double lane[kLanes] = {};
  std::int64_t j = 0;
  for (; j + kLanes <= d; j += kLanes) {
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
  if (comm.rank() == owner) {
    const double* src = data.row(index - part.first_sample);
    std::copy(src, src + data.features, row.begin());
  }
  comm.broadcast(row.data(), row.size(), coll::DataType::f64, owner);
  return row;
}

std::vector<double> initial_centroids(coll::Communicator& comm, const SamplePartition& part,
                                      const DatasetSlice& data, const KMeansOptions& options) {
  switch (options.init) {
    case KMeansInit::random: return random_init(comm, part, data, options);
    case KMeansInit::plusplus: return plusplus_init(comm, part, data, options);
  }
  HPCTRAIN_FAIL("k-means: unknown initialisation");
}

}  // namespace hpctrain::ml
