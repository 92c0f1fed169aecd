// Hamerly's bounds for Lloyd's assignments, exact to the bit (kmeans_bounds.hpp).
//
// Schedule (Hamerly 2010, "Making k-means even faster"): each local sample i keeps u_i >= its
// Euclidean distance to its centroid a_i and l_i <= its distance to every other centroid. After
// an update that moves centroid c by s_c, u_i += s_{a_i} and l_i -= max_{c != a_i} s_c (the
// triangle inequality). An assignment then tests each sample: if its bounds are apart by more
// than the margin below, its label stands and nothing of it is read; otherwise its row is read,
// u_i tightened to the computed distance and the test repeated; only if that fails too are its
// scores computed (CentroidSearch, the kernel of the full pass), which also reset both bounds.
// The per-cluster sums keep the full pass's sum-block terms (a block's sum in sample order,
// added exactly over blocks): a block's term of cluster c is re-summed, in the same order, only
// when c lost or gained a sample of that block. A term is not updated by subtracting the samples
// that left: inside a block the sum is an ordinary double sum, rounded at each add, whose bits
// a subtraction does not restore.
// Cost per iteration: N/P bound tests, plus (read + d γ) per tightened sample, plus (K d γ) per
// searched one, plus (read + d γ) per sample of a re-summed block term; then
// exact_sum_over_samples of K d + K elements, as the full pass.
//
// Why a skipped sample's label is the full pass's (the margin). The full pass picks
// argmin_c s_c, s_c = fl(N_c - 2 g_c), N_c the computed ||c||^2 and g_c the computed dot x.c,
// strict < so ties go to the lowest index. With unit roundoff u of the products (2^-24 float,
// 2^-53 double) and gamma_n = n u / (1 - n u): a dot of d terms summed in any order (the lane
// tree, a dgemm with or without FMA), of inputs rounded once each to float, is within
// gamma_{d+2} sum_j |x_j c_j| <= gamma_{d+2} ||x|| ||c|| of x.c (Higham, Accuracy and Stability,
// 3.1); N_c is within gamma_d ||c||^2 and the double subtraction adds 2^-53 |N_c - 2 g_c|. So
// |s_c - (||c||^2 - 2 x.c)| <= gamma_{d+4} (||x|| + C)^2 =: E with C >= max ||c||, and
// ||x|| <= u_i + ||c_{a_i}|| <= u_i + C. Since ||c||^2 - 2 x.c = D_c - ||x||^2 (D_c the exact
// squared distance), s_c - s_a >= D_c - D_a - 2E >= l_i^2 - u_i^2 - 2E for every c != a: when
// l_i^2 - u_i^2 > 2E every other score is strictly above s_a, and the argmin, ties included,
// is a. The same relation sets l_i after a search: D_c >= D_a + (s_second - s_a) - 2E with
// D_a >= the computed d2 up to its rounding. Every f64 operation on the bounds (the shifts, the
// sums, the squares, the test) is rounded outward by the factor 1 +- slack, slack =
// gamma_{d+8} at 2^-53, which exceeds the relative error of a d-term squared_distance and of the
// few operations after it. On Fashion-MNIST (f32, d = 784) 2E is ~0.1 against squared distances
// of ~30.
#include "kmeans_bounds.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "hpctrain/ml/exact_block_sum.hpp"
#include "hpctrain/ml/kmeans.hpp"

namespace hpctrain::ml::detail {

namespace {

constexpr double kUnitF64 = 0x1p-53;
constexpr double kUnitF32 = 0x1p-24;

double gamma(std::int64_t n, double unit) {
  const double nu = static_cast<double>(n) * unit;
  return nu / (1.0 - nu);
}

}  // namespace

HamerlyBounds::HamerlyBounds(const SamplePartition& part, const DatasetSlice& data, std::int64_t k, bool f32_products)
    : part_(part),
      data_(data),
      k_(k),
      d_(data.features),
      f32_(f32_products),
      slack_(gamma(data.features + 8, kUnitF64)),
      score_error_(gamma(data.features + 4, f32_products ? kUnitF32 : kUnitF64)),
      width_(static_cast<std::size_t>(k * data.features + k)),
      label_(static_cast<std::size_t>(data.rows), -1),
      upper_(label_.size(), 0.0),
      lower_(label_.size(), 0.0),
      terms_(static_cast<std::size_t>(part.block_count) * width_, 0.0),
      dirty_(static_cast<std::size_t>(k), 0),
      origin_(static_cast<std::size_t>(data.features), 0.0) {}

bool HamerlyBounds::settled(std::int64_t i, double largest_norm) const noexcept {
  const double u = upper_[static_cast<std::size_t>(i)], l = lower_[static_cast<std::size_t>(i)];
  const double reach = u + 2.0 * largest_norm;  // >= ||x|| + C
  const double margin = 2.0 * score_error_ * reach * reach;
  return l * l * (1.0 - slack_) > (u * u + margin) * (1.0 + slack_);
}

void HamerlyBounds::record(std::int64_t i, std::int64_t label, double d2, double gap, double largest_norm) {
  const auto at = static_cast<std::size_t>(i);
  if (label != label_[at]) {
    if (label_[at] >= 0) dirty_[static_cast<std::size_t>(label_[at])] = 1;
    dirty_[static_cast<std::size_t>(label)] = 1;
    label_[at] = label;
  }
  upper_[at] = std::sqrt(d2) * (1.0 + slack_);
  const double reach = upper_[at] + 2.0 * largest_norm;
  const double margin = 2.0 * score_error_ * reach * reach;
  const double lower2 = (d2 + gap) * (1.0 - slack_) - margin * (1.0 + slack_);  // gap = +inf at k = 1
  lower_[at] = lower2 > 0.0 ? std::sqrt(lower2) * (1.0 - slack_) : 0.0;
  ++searched_;
}

void HamerlyBounds::search_block(CentroidSearch& search, const std::vector<double>& centroids, double largest_norm,
                                 std::int64_t block) {
  const std::int64_t first = part_.block_begin(block), end = first + part_.block_length(block);
  const std::int64_t per_call = search.rows_per_call();
  rows_.resize(static_cast<std::size_t>(per_call * d_));
  pending_.resize(static_cast<std::size_t>(per_call));
  found_label_.resize(pending_.size());
  found_d2_.resize(pending_.size());
  found_gap_.resize(pending_.size());
  for (std::int64_t sub = first; sub < end; sub += per_call) {
    const std::int64_t n = std::min(per_call, end - sub);
    std::int64_t m = 0;  // rows in doubt, widened into rows_ (slot m) for the float search
    for (std::int64_t i = sub; i < sub + n; ++i) {
      const std::int64_t a = label_[static_cast<std::size_t>(i)];
      if (a >= 0 && settled(i, largest_norm)) continue;
      double* row = rows_.data() + m * d_;
      data_.widen_rows(i, 1, row);
      if (a >= 0) {
        upper_[static_cast<std::size_t>(i)] =
            std::sqrt(squared_distance(row, centroids.data() + a * d_, d_)) * (1.0 + slack_);
        if (settled(i, largest_norm)) continue;
      }
      pending_[static_cast<std::size_t>(m++)] = i;
    }
    if (m == 0) continue;
    if (f32_) {  // a row's float search does not depend on the rows beside it
      search.nearest(rows_.data(), m, found_label_.data(), found_d2_.data(), found_gap_.data());
      for (std::int64_t j = 0; j < m; ++j) {
        const auto s = static_cast<std::size_t>(j);
        record(pending_[s], found_label_[s], found_d2_[s], found_gap_[s], largest_norm);
      }
    } else {  // a dgemm's bits may: the whole sub-block, as the full pass calls it
      const double* x = data_.rows_f64(sub, n, rows_.data());
      search.nearest(x, n, found_label_.data(), found_d2_.data(), found_gap_.data());
      for (std::int64_t j = 0; j < m; ++j) {
        const std::int64_t i = pending_[static_cast<std::size_t>(j)];
        const auto s = static_cast<std::size_t>(i - sub);
        record(i, found_label_[s], found_d2_[s], found_gap_[s], largest_norm);
      }
    }
  }
}

void HamerlyBounds::rebuild_terms(std::int64_t block) {
  double* term = terms_.data() + static_cast<std::size_t>(block) * width_;
  double* squares = term + k_ * d_;
  for (std::int64_t c = 0; c < k_; ++c) {
    if (dirty_[static_cast<std::size_t>(c)] == 0) continue;
    std::fill(term + c * d_, term + (c + 1) * d_, 0.0);
    squares[c] = 0.0;
  }
  rows_.resize(static_cast<std::size_t>(d_));
  const std::int64_t first = part_.block_begin(block), end = first + part_.block_length(block);
  for (std::int64_t i = first; i < end; ++i) {
    const std::int64_t c = label_[static_cast<std::size_t>(i)];
    if (dirty_[static_cast<std::size_t>(c)] == 0) continue;
    const double* row = data_.rows_f64(i, 1, rows_.data());
    double* sum = term + c * d_;
    for (std::int64_t j = 0; j < d_; ++j) sum[j] += row[j];  // the full pass's adds, in its order
    squares[c] += squared_distance(row, origin_.data(), d_);
  }
}

Assignment HamerlyBounds::assign(coll::Communicator& comm, const std::vector<double>& centroids) {
  CentroidSearch search(centroids, k_, d_, f32_);
  const double largest_norm =
      std::sqrt(*std::max_element(search.norms().begin(), search.norms().end())) * (1.0 + slack_);
  searched_ = 0;
  for (std::int64_t b = 0; b < part_.block_count; ++b) {
    std::fill(dirty_.begin(), dirty_.end(), 0);
    search_block(search, centroids, largest_norm, b);
    if (std::find(dirty_.begin(), dirty_.end(), 1) != dirty_.end()) rebuild_terms(b);
  }
  Assignment a;
  a.counts.assign(static_cast<std::size_t>(k_), 0);
  for (const std::int64_t c : label_) ++a.counts[static_cast<std::size_t>(c)];
  comm.allreduce(a.counts.data(), a.counts.size(), coll::ReduceOp::sum);
  std::vector<double> total =
      exact_sum_over_samples(comm, part_, width_, [&](std::int64_t first, std::int64_t, double* term) {
        const std::int64_t block = (part_.first_sample + first) / kSumBlockSamples - part_.first_block;
        const double* cached = terms_.data() + static_cast<std::size_t>(block) * width_;
        std::copy(cached, cached + width_, term);
      });
  for (std::int64_t c = 0; c < k_; ++c) {
    const auto n = static_cast<double>(a.counts[static_cast<std::size_t>(c)]);
    double cross = 0.0;
    for (std::int64_t j = 0; j < d_; ++j) cross += centroids[static_cast<std::size_t>(c * d_ + j)] * total[static_cast<std::size_t>(c * d_ + j)];
    a.inertia += total[static_cast<std::size_t>(k_ * d_ + c)] - 2.0 * cross + n * search.norms()[static_cast<std::size_t>(c)];
  }
  total.resize(static_cast<std::size_t>(k_ * d_));
  a.sums = std::move(total);
  return a;
}

void HamerlyBounds::move(const std::vector<double>& before, const std::vector<double>& after) {
  std::vector<double> shift(static_cast<std::size_t>(k_));
  std::int64_t farthest = 0;
  for (std::int64_t c = 0; c < k_; ++c) {
    shift[static_cast<std::size_t>(c)] =
        std::sqrt(squared_distance(before.data() + c * d_, after.data() + c * d_, d_)) * (1.0 + slack_);
    if (shift[static_cast<std::size_t>(c)] > shift[static_cast<std::size_t>(farthest)]) farthest = c;
  }
  double runner_up = 0.0;  // the largest shift but the farthest centroid's
  for (std::int64_t c = 0; c < k_; ++c) {
    if (c != farthest) runner_up = std::max(runner_up, shift[static_cast<std::size_t>(c)]);
  }
  for (std::size_t i = 0; i < label_.size(); ++i) {
    const std::int64_t a = label_[i];
    upper_[i] = (upper_[i] + shift[static_cast<std::size_t>(a)]) * (1.0 + slack_);
    const double lowered = lower_[i] - (a == farthest ? runner_up : shift[static_cast<std::size_t>(farthest)]);
    lower_[i] = lowered > 0.0 ? lowered * (1.0 - slack_) : 0.0;
  }
}

std::vector<double> HamerlyBounds::distances(const std::vector<double>& centroids) const {
  std::vector<double> d2(label_.size());
  std::vector<double> row(static_cast<std::size_t>(d_));
  for (std::size_t i = 0; i < label_.size(); ++i) {
    const double* x = data_.rows_f64(static_cast<std::int64_t>(i), 1, row.data());
    d2[i] = squared_distance(x, centroids.data() + label_[i] * d_, d_);
  }
  return d2;
}

}  // namespace hpctrain::ml::detail
