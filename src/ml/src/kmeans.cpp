// Lloyd's k-means with exact, P-independent per-cluster sums; see kmeans.hpp.
#include "hpctrain/ml/kmeans.hpp"
#include "hpctrain/ml/feature_scaling.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include <fmt/format.h>

#include "hpctrain/base/error.hpp"
#include "hpctrain/ml/exact_block_sum.hpp"
#include "blas_products.hpp"
#include "centroid_search.hpp"
#include "kmeans_bounds.hpp"
#include "hpctrain/base/vector_clones.hpp"

namespace hpctrain::ml {

namespace {

using detail::Assignment;

/// Collective: the full assignment pass, every sample's scores computed.
Assignment assign(coll::Communicator& comm, const SamplePartition& part, const DatasetSlice& data,
                  const std::vector<double>& centroids, std::int64_t k, bool f32_products = false) {
  const std::int64_t d = data.features;
  Assignment a;
  a.counts.assign(static_cast<std::size_t>(k), 0);
  a.d2.assign(static_cast<std::size_t>(data.rows), 0.0);
  std::vector<std::int64_t> label(static_cast<std::size_t>(data.rows));
  const auto width = static_cast<std::size_t>(k * d + 1);  // sums, then the inertia
  std::vector<double> total = exact_sum_over_samples(comm, part, width, [&](std::int64_t first, std::int64_t count,
                                                                            double* term) {
    // The per-cluster sums come from the same cache-resident pass (term holds k x d sums first).
    if (f32_products) {
      nearest_centroids_f32(data, first, count, centroids, k, label.data() + first, a.d2.data() + first, term);
    } else {
      nearest_centroids(data, first, count, centroids, k, label.data() + first, a.d2.data() + first, term);
    }
    for (std::int64_t i = first; i < first + count; ++i) {
      const auto at = static_cast<std::size_t>(i);
      term[width - 1] += a.d2[at];
      ++a.counts[static_cast<std::size_t>(label[at])];
    }
  });
  comm.allreduce(a.counts.data(), a.counts.size(), coll::ReduceOp::sum);
  a.inertia = total.back();
  total.pop_back();
  a.sums = std::move(total);
  return a;
}

/// Collective: the global index of the local-or-remote sample with the largest `d2` (ties to
/// the lowest index), then its d2 is set to -1 so the next call finds the next one.
std::int64_t take_farthest(coll::Communicator& comm, const DatasetSlice& data, std::vector<double>& d2) {
  double best = -1.0;
  std::int64_t arg = std::numeric_limits<std::int64_t>::max();
  for (std::int64_t i = 0; i < data.rows; ++i) {
    if (d2[static_cast<std::size_t>(i)] > best) {
      best = d2[static_cast<std::size_t>(i)];
      arg = data.first + i;
    }
  }
  double global_best = best;
  comm.allreduce(&global_best, 1, coll::ReduceOp::max);
  std::int64_t index = best == global_best ? arg : std::numeric_limits<std::int64_t>::max();
  comm.allreduce(&index, 1, coll::ReduceOp::min);
  if (index >= data.first && index < data.first + data.rows) d2[static_cast<std::size_t>(index - data.first)] = -1.0;
  return index;
}

}  // namespace

namespace {

/// ||c||^2 of each of the k centroids (k x d).
std::vector<double> centroid_norms(const std::vector<double>& centroids, std::int64_t k, std::int64_t d) {
  std::vector<double> norms(static_cast<std::size_t>(k));
  const std::vector<double> origin(static_cast<std::size_t>(d), 0.0);
  for (std::int64_t c = 0; c < k; ++c) {
    norms[static_cast<std::size_t>(c)] = squared_distance(centroids.data() + c * d, origin.data(), d);
  }
  return norms;
}

/// The second half of a sub-block's assignment, given the dots x.c of its n rows (n x k, double
/// or float): the nearest centroid by argmin ||c||^2 - 2 x.c (ties to the lowest index), the
/// squared distance to it from the f64 rows, each row added to its centroid's sum (with `sums`)
/// and the second lowest score minus the lowest (with `gap`).
template <typename Dot>
inline HPCTRAIN_ALWAYS_INLINE void assign_sub_block(const double* x, const Dot* dots, std::int64_t n, std::int64_t d,
                                                    const std::vector<double>& centroids, std::int64_t k,
                                                    const std::vector<double>& norms, std::int64_t* label, double* d2,
                                                    double* sums, double* gap = nullptr) {
  for (std::int64_t i = 0; i < n; ++i) {
    const Dot* g = dots + i * k;
    std::int64_t arg = 0;
    double best = std::numeric_limits<double>::infinity(), second = best;
    for (std::int64_t c = 0; c < k; ++c) {
      const double score = norms[static_cast<std::size_t>(c)] - 2.0 * static_cast<double>(g[c]);
      if (score < best) {  // strict: ties go to the lowest index
        second = best;
        best = score;
        arg = c;
      } else if (score < second) {
        second = score;
      }
    }
    label[i] = arg;
    if (gap != nullptr) gap[i] = second - best;
    const double* row = x + i * d;
    d2[i] = squared_distance(row, centroids.data() + arg * d, d);
    if (sums != nullptr) {
      double* sum = sums + arg * d;
      for (std::int64_t j = 0; j < d; ++j) sum[j] += row[j];
    }
  }
}

/// nearest_centroids on one sub-block of n <= kSubBlockRows rows x; `dots` holds
/// kSubBlockRows x k doubles of scratch.
HPCTRAIN_VECTOR_CLONES
void nearest_in_sub_block(const double* x, std::int64_t n, std::int64_t d, const std::vector<double>& centroids,
                          std::int64_t k, const std::vector<double>& norms, double* dots, std::int64_t* label,
                          double* d2, double* sums, double* gap = nullptr) {
  detail::rows_times_transpose(x, n, d, centroids.data(), k, dots);
  assign_sub_block(x, dots, n, d, centroids, k, norms, label, d2, sums, gap);
}

/// Rows per pass of nearest_centroids_f32: their f64 rows (widened, for a uint8 slice) and float
/// copies, 16 x d x 12 bytes (150 KB at d = 784), stay in L2 from the widening to the sums. Any
/// value gives the same bits (a row's label and distance depend on the row alone).
constexpr std::int64_t kFloatPassRows = 16;

/// nearest_in_sub_block with float dots: x32 (scratch, n x d) receives the f64 rows x rounded
/// to float, whose dots with c32 (the centroids rounded to float) pick the nearest centroid;
/// the squared distance and the sums are taken from the f64 rows, as in nearest_in_sub_block.
HPCTRAIN_VECTOR_CLONES
void nearest_in_sub_block_f32(const double* x, float* x32, std::int64_t n, std::int64_t d,
                              const std::vector<float>& c32, const std::vector<double>& centroids, std::int64_t k,
                              const std::vector<double>& norms, float* dots, std::int64_t* label, double* d2,
                              double* sums, double* gap = nullptr) {
  for (std::int64_t e = 0; e < n * d; ++e) x32[e] = static_cast<float>(x[e]);
  centroid_dots_f32(x32, n, d, c32.data(), k, dots);
  assign_sub_block(x, dots, n, d, centroids, k, norms, label, d2, sums, gap);
}

}  // namespace

namespace detail {

CentroidSearch::CentroidSearch(const std::vector<double>& centroids, std::int64_t k, std::int64_t d,
                               bool f32_products)
    : centroids_(centroids), k_(k), d_(d), f32_(f32_products), norms_(centroid_norms(centroids, k, d)) {
  if (f32_) {
    c32_.assign(centroids.begin(), centroids.end());
    x32_.resize(static_cast<std::size_t>(kFloatPassRows * d));
    dots32_.resize(static_cast<std::size_t>(kFloatPassRows * k));
  } else {
    dots64_.resize(static_cast<std::size_t>(kSubBlockRows * k));
  }
}

std::int64_t CentroidSearch::rows_per_call() const noexcept { return f32_ ? kFloatPassRows : kSubBlockRows; }

void CentroidSearch::nearest(const double* x, std::int64_t n, std::int64_t* label, double* d2, double* gap) {
  if (f32_) {
    nearest_in_sub_block_f32(x, x32_.data(), n, d_, c32_, centroids_, k_, norms_, dots32_.data(), label, d2, nullptr,
                             gap);
  } else {
    nearest_in_sub_block(x, n, d_, centroids_, k_, norms_, dots64_.data(), label, d2, nullptr, gap);
  }
}

}  // namespace detail

void nearest_centroids_f32(const DatasetSlice& data, std::int64_t first, std::int64_t rows,
                           const std::vector<double>& centroids, std::int64_t k, std::int64_t* label, double* d2,
                           double* sums) {
  const std::int64_t d = data.features;
  const std::vector<double> norms = centroid_norms(centroids, k, d);
  const std::vector<float> c32(centroids.begin(), centroids.end());
  std::vector<float> dots(static_cast<std::size_t>(kFloatPassRows * k));
  std::vector<float> x32(static_cast<std::size_t>(kFloatPassRows * d));
  std::vector<double> widened;
  for_each_f64_block(data, first, rows, kFloatPassRows, widened, [&](const double* x, std::int64_t at, std::int64_t n) {
    const std::int64_t sub = at - first;
    nearest_in_sub_block_f32(x, x32.data(), n, d, c32, centroids, k, norms, dots.data(), label + sub, d2 + sub, sums);
  });
}

void nearest_centroids(const double* x, std::int64_t rows, std::int64_t d, const std::vector<double>& centroids,
                       std::int64_t k, std::int64_t* label, double* d2, double* sums) {
  const std::vector<double> norms = centroid_norms(centroids, k, d);
  std::vector<double> dots(static_cast<std::size_t>(detail::kSubBlockRows * k));
  for (std::int64_t sub = 0; sub < rows; sub += detail::kSubBlockRows) {
    const std::int64_t n = std::min(detail::kSubBlockRows, rows - sub);
    nearest_in_sub_block(x + sub * d, n, d, centroids, k, norms, dots.data(), label + sub, d2 + sub, sums);
  }
}

void nearest_centroids(const DatasetSlice& data, std::int64_t first, std::int64_t rows,
                       const std::vector<double>& centroids, std::int64_t k, std::int64_t* label, double* d2,
                       double* sums) {
  const std::int64_t d = data.features;
  const std::vector<double> norms = centroid_norms(centroids, k, d);
  std::vector<double> dots(static_cast<std::size_t>(detail::kSubBlockRows * k));
  std::vector<double> widened;
  for_each_f64_block(data, first, rows, detail::kSubBlockRows, widened, [&](const double* x, std::int64_t at,
                                                                           std::int64_t n) {
    const std::int64_t sub = at - first;
    nearest_in_sub_block(x, n, d, centroids, k, norms, dots.data(), label + sub, d2 + sub, sums);
  });
}

namespace {

/// Mean over features of their population variance (scikit-learn's _tolerance scale).
double mean_variance(coll::Communicator& comm, const SamplePartition& part, const DatasetSlice& data) {
  const Standardization m = feature_moments(comm, part, data);
  double sum = 0.0;
  for (const double s : m.std) sum += s * s;
  return m.std.empty() ? 0.0 : sum / static_cast<double>(m.std.size());
}

double squared_shift(const std::vector<double>& a, const std::vector<double>& b) {
  double sum = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) sum += (b[i] - a[i]) * (b[i] - a[i]);
  return sum;
}

}  // namespace

KMeansResult fit_kmeans(coll::Communicator& comm, const SamplePartition& part, const DatasetSlice& data,
                        const KMeansOptions& o) {
  HPCTRAIN_REQUIRE(o.k >= 1, fmt::format("k-means: --k must be at least 1, got {}", o.k));
  HPCTRAIN_REQUIRE(o.k <= part.total_samples,
                   fmt::format("k-means: --k {} exceeds the number of samples ({}) in '{}'", o.k, part.total_samples,
                               data.path));
  HPCTRAIN_REQUIRE(o.max_iter >= 1, fmt::format("k-means: --max-iter must be at least 1, got {}", o.max_iter));
  HPCTRAIN_REQUIRE(o.tol >= 0.0 && std::isfinite(o.tol), fmt::format("k-means: --tol must be >= 0, got {}", o.tol));
  HPCTRAIN_REQUIRE(o.init_rounds >= 1, fmt::format("k-means: --init-rounds must be at least 1, got {}", o.init_rounds));
  HPCTRAIN_REQUIRE(o.oversampling > 0.0 && std::isfinite(o.oversampling),
                   fmt::format("k-means: --oversampling must be > 0, got {}", o.oversampling));
  const std::int64_t k = o.k, d = data.features;
  const detail::SingleBlasThread one_blas_thread;
  KMeansResult r;
  r.k = k;
  r.features = d;
  r.centroids = initial_centroids(comm, part, data, o);
  const double shift_tol = o.stop == KMeansStop::shift ? o.tol * mean_variance(comm, part, data) : 0.0;
  // The inertia rule's test reads the bits of the full pass's inertia, which the bounds' does not have.
  std::optional<detail::HamerlyBounds> bounds;
  if (o.bounds && o.stop == KMeansStop::shift) bounds.emplace(part, data, k, o.f32_products);
  double previous = std::numeric_limits<double>::infinity();
  std::vector<double> before;
  for (std::int64_t it = 1; it <= o.max_iter; ++it) {
    Assignment a = bounds ? bounds->assign(comm, r.centroids) : assign(comm, part, data, r.centroids, k, o.f32_products);
    before = r.centroids;
    for (std::int64_t c = 0; c < k; ++c) {
      const auto n = a.counts[static_cast<std::size_t>(c)];
      if (n == 0) continue;
      for (std::int64_t j = 0; j < d; ++j) {
        r.centroids[static_cast<std::size_t>(c * d + j)] = a.sums[static_cast<std::size_t>(c * d + j)] / static_cast<double>(n);
      }
    }
    for (std::int64_t c = 0; c < k; ++c) {
      if (a.counts[static_cast<std::size_t>(c)] != 0) continue;
      if (a.d2.empty()) a.d2 = bounds->distances(before);
      const auto row = fetch_sample(comm, part, data, take_farthest(comm, data, a.d2));
      std::copy(row.begin(), row.end(), r.centroids.begin() + c * d);
      ++r.reseeded;
    }
    if (bounds) bounds->move(before, r.centroids);
    r.iterations = it;
    if (o.on_iteration) o.on_iteration(it, a.inertia);
    const bool met = o.stop == KMeansStop::shift ? squared_shift(before, r.centroids) <= shift_tol
                                                   : std::fabs(previous - a.inertia) <= o.tol * a.inertia;
    if (met) {
      r.converged = true;
      break;
    }
    previous = a.inertia;
  }
  r.inertia = assign(comm, part, data, r.centroids, k, o.f32_products).inertia;
  return r;
}

double kmeans_purity(coll::Communicator& comm, const SamplePartition& part, const DatasetSlice& data,
                     const KMeansResult& model) {
  const std::int64_t k = model.k, c = data.classes;
  HPCTRAIN_REQUIRE(c >= 1 && static_cast<std::int64_t>(data.labels.size()) == data.rows,
                   fmt::format("k-means: purity needs the labels of '{}'", data.path));
  std::vector<std::int64_t> counts(static_cast<std::size_t>(k * c), 0);
  std::vector<std::int64_t> label(static_cast<std::size_t>(kSumBlockSamples));
  std::vector<double> d2(label.size());
  for (std::int64_t b = 0; b < part.block_count; ++b) {
    const std::int64_t first = part.block_begin(b), rows = part.block_length(b);
    nearest_centroids(data, first, rows, model.centroids, k, label.data(), d2.data());
    for (std::int64_t i = 0; i < rows; ++i) {
      ++counts[static_cast<std::size_t>(label[static_cast<std::size_t>(i)] * c +
                                        data.labels[static_cast<std::size_t>(first + i)])];
    }
  }
  comm.allreduce(counts.data(), counts.size(), coll::ReduceOp::sum);
  std::int64_t majority = 0;
  for (std::int64_t cl = 0; cl < k; ++cl) {
    majority += *std::max_element(counts.begin() + cl * c, counts.begin() + (cl + 1) * c);
  }
  return static_cast<double>(majority) / static_cast<double>(part.total_samples);
}

}  // namespace hpctrain::ml
