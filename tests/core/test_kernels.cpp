// Element-wise kernels, softmax cross-entropy and dropout against float64 references.
#include "gradient_check.hpp"
#include "hpctrain/base/error.hpp"
#include "hpctrain/core/elementwise.hpp"
#include "hpctrain/core/loss.hpp"

#include "hpctrain/core/conv.hpp"
#include "hpctrain/core/environment.hpp"
#include "hpctrain/core/leaf_tree.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>
#include <vector>

namespace hpctrain::core {
namespace {

using hpctrain::testing::expect_gradient_matches;
using hpctrain::testing::random_tensor;
using hpctrain::testing::random_values;

double gelu_reference(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

TEST(Activations, ForwardMatchesReference) {
  const auto x = random_tensor<float>("x", {257}, 11, -4.0, 4.0);
  auto y = make_tensor<float>("y", {257});
  const auto hx = to_host(x.data);
  relu_forward(x.data, y.data);
  auto hy = to_host(y.data);
  for (std::size_t i = 0; i < hx.size(); ++i) EXPECT_EQ(hy[i], hx[i] > 0 ? hx[i] : 0.f);
  gelu_forward(x.data, y.data);
  hy = to_host(y.data);
  for (std::size_t i = 0; i < hx.size(); ++i) {
    EXPECT_NEAR(hy[i], gelu_reference(hx[i]), 1e-6);
    // The tanh form stays within 1e-3 of the exact x * Phi(x).
    EXPECT_NEAR(hy[i], 0.5 * hx[i] * (1.0 + std::erf(hx[i] / std::sqrt(2.0))), 1e-3);
  }
}

void check_activation_gradient(bool gelu) {
  const auto x = random_tensor<double>("x", {40}, 12, -3.0, 3.0);
  auto y = make_tensor<double>("y", {40});
  auto dx = make_tensor<double>("dx", {40});
  const auto w = random_values<double>(40, 13);
  const auto dy = tensor_from_host<double>("dy", {40}, w);
  auto forward = [&] {
    if (gelu) gelu_forward(x.data, y.data); else relu_forward(x.data, y.data);
  };
  forward();
  if (gelu) gelu_backward(x.data, dy.data, dx.data); else relu_backward(y.data, dy.data, dx.data);
  expect_gradient_matches(gelu ? "gelu" : "relu", x.data, to_host(dx.data), [&] {
    forward();
    return hpctrain::testing::weighted_sum(y, w);
  });
}

/// Float GELU on both backends (oneDNN's eltwise kernel where built, the portable one) against
/// float64: the forward and the derivative of the same tanh form.
TEST(Activations, FloatGeluOnEveryBackendMatchesFloat64) {
  const auto x = random_tensor<float>("x", {1031}, 21, -6.0, 6.0);
  const auto dy = random_tensor<float>("dy", {1031}, 22);
  const auto hx = to_host(x.data), hdy = to_host(dy.data);
  std::vector<ConvBackend> backends{ConvBackend::portable};
  if (onednn_available()) backends.push_back(ConvBackend::onednn);
  const ConvBackend saved = conv_backend();
  for (const ConvBackend b : backends) {
    set_conv_backend(b);
    auto y = make_tensor<float>("y", {1031});
    auto dx = make_tensor<float>("dx", {1031});
    gelu_forward(x.data, y.data);
    gelu_backward(x.data, dy.data, dx.data);
    const auto hy = to_host(y.data), hdx = to_host(dx.data);
    for (std::size_t i = 0; i < hx.size(); ++i) {
      const double v = hx[i], c = std::sqrt(2.0 / M_PI);
      const double t = std::tanh(c * (v + 0.044715 * v * v * v));
      const double d = 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * c * (1 + 3 * 0.044715 * v * v);
      EXPECT_NEAR(hy[i], gelu_reference(v), 2e-6 * (1 + std::fabs(v))) << conv_backend_name(b) << " x=" << v;
      EXPECT_NEAR(hdx[i], hdy[i] * d, 2e-6 * (1 + std::fabs(hdy[i] * d))) << conv_backend_name(b) << " x=" << v;
    }
  }
  set_conv_backend(saved);
}

TEST(Activations, ReluBackwardMatchesFiniteDifferences) { check_activation_gradient(false); }
TEST(Activations, GeluBackwardMatchesFiniteDifferences) { check_activation_gradient(true); }

template <class T>
void check_count_nonfinite() {
  using L = std::numeric_limits<T>;
  // Every finite extreme counts as finite; NaN (quiet, signalling, negative) and +-inf do not.
  const std::vector<T> finite = {T(0), -T(0), L::max(), L::lowest(), L::min(), L::denorm_min(), -L::denorm_min(),
                                 T(1e30), T(-3)};
  const auto a = tensor_from_host<T>("finite", {static_cast<std::int64_t>(finite.size())}, finite);
  EXPECT_EQ(count_nonfinite(a.data), 0);
  std::vector<T> mixed(1000, T(0.5));
  mixed[0] = L::infinity();
  mixed[17] = -L::infinity();
  mixed[500] = L::quiet_NaN();
  mixed[998] = -L::quiet_NaN();
  mixed[999] = L::signaling_NaN();
  const auto b = tensor_from_host<T>("mixed", {1000}, mixed);
  EXPECT_EQ(count_nonfinite(b.data), 5);
  const auto empty = tensor_from_host<T>("empty", {0}, {});
  EXPECT_EQ(count_nonfinite(empty.data), 0);
  // Over several of the host path's counting chunks (2^16 elements): both sides of an
  // edge, and the end.
  std::vector<T> longer((std::size_t{1} << 20) + 3, T(-2));
  longer[(std::size_t{1} << 20) - 1] = L::quiet_NaN();
  longer[std::size_t{1} << 20] = L::infinity();
  longer.back() = -L::infinity();
  const auto c = tensor_from_host<T>("longer", {static_cast<std::int64_t>(longer.size())}, longer);
  EXPECT_EQ(count_nonfinite(c.data), 3);
}

TEST(Finiteness, CountsNanAndInfinitiesOnly) {
  check_count_nonfinite<float>();
  check_count_nonfinite<double>();
}

TEST(Bias, AddAndAccumulate) {
  const auto y = tensor_from_host<double>("y", {2, 3}, {1, 2, 3, 4, 5, 6});
  const auto b = tensor_from_host<double>("b", {3}, {10, 20, 30});
  add_row_bias(y.matrix(2), b.data);
  EXPECT_EQ(to_host(y.data), (std::vector<double>{11, 22, 33, 14, 25, 36}));
  accumulate_column_sums(y.matrix(2), b.data);  // accumulates onto the old bias
  EXPECT_EQ(to_host(b.data), (std::vector<double>{35, 67, 99}));
  auto r = tensor_from_host<double>("r", {2}, {1, 1});
  accumulate_row_sums(y.matrix(2), r.data);
  EXPECT_EQ(to_host(r.data), (std::vector<double>{67, 76}));
}

// The bias gradient over micro-shard leaves: each leaf's column sums alone (into zeros, as a
// micro-shard's written gradient), added pairwise over the leaf tree; bit for bit, and db is
// overwritten. 7 rows in leaves of 3: leaves {0,1,2}, {3,4,5}, {6}: (l0 + l1) + l2.
TEST(Bias, ColumnSumsOverLeavesAreTheTreeOfLeafSums) {
  const auto hy = random_values<float>(7 * 5, 31, -1e3, 1e3);
  const auto y = tensor_from_host<float>("y", {7, 5}, hy);
  const auto db = tensor_from_host<float>("db", {5}, std::vector<float>(5, NAN));
  column_sums_leaf_tree(3, y.matrix(7), db.data);
  const auto got = to_host(db.data);
  for (int j = 0; j < 5; ++j) {
    float leaf[3] = {};
    for (int r = 0; r < 7; ++r) leaf[r / 3] += hy[static_cast<std::size_t>(r * 5 + j)];
    const float want = (leaf[0] + leaf[1]) + leaf[2];
    EXPECT_EQ(std::memcmp(&got[static_cast<std::size_t>(j)], &want, sizeof(float)), 0) << "column " << j;
  }
  // one leaf: accumulate_column_sums into zeros
  const auto one = tensor_from_host<float>("one", {5}, std::vector<float>(5, 0.F));
  accumulate_column_sums(y.matrix(7), one.data);
  column_sums_leaf_tree(16, y.matrix(7), db.data);
  EXPECT_EQ(to_host(db.data), to_host(one.data));
  EXPECT_THROW(column_sums_leaf_tree(0, y.matrix(7), db.data), Error);
  EXPECT_THROW(column_sums_leaf_tree(3, y.matrix(7), make_tensor<float>("short", {4}).data), Error);
}

// At the sizes where the rank's threads share the columns (the MLP's fc1 at 128 rows in leaves
// of 16; 300 rows of 37 columns in leaves of 7: a partial column block and a right-clipped
// tree): the same tree of leaf sums, bit for bit, at 1 and 2 threads.
TEST(Bias, ColumnSumsOverLeavesAtEveryThreadCount) {
  const int threads_before = std::max(1, blas_threads());
  for (const auto& shape : std::vector<std::tuple<int, int, int>>{{128, 512, 16}, {300, 37, 7}, {1000, 40, 16}}) {
    const int rows = std::get<0>(shape), cols = std::get<1>(shape), leaf = std::get<2>(shape);  // lambdas capture them
    const auto hy = random_values<float>(static_cast<std::size_t>(rows * cols), 32, -1e3, 1e3);
    const auto y = tensor_from_host<float>("y", {rows, cols}, hy);
    const int leaves = (rows + leaf - 1) / leaf;
    std::vector<float> want(static_cast<std::size_t>(cols));
    for (int j = 0; j < cols; ++j) {
      std::vector<float> slots(static_cast<std::size_t>(leaf_tree_depth(leaves)));
      leaf_tree_sum(
          leaves,
          [&](std::int64_t l, int d) {
            float s = 0;
            for (int r = static_cast<int>(l) * leaf; r < std::min(rows, static_cast<int>(l + 1) * leaf); ++r) {
              s += hy[static_cast<std::size_t>(r * cols + j)];
            }
            slots[static_cast<std::size_t>(d)] = s;
          },
          [&](int dst, int src) { slots[static_cast<std::size_t>(dst)] += slots[static_cast<std::size_t>(src)]; });
      want[static_cast<std::size_t>(j)] = slots[0];
    }
    for (const int threads : {1, 2}) {
      set_blas_threads(threads);
      const auto db = tensor_from_host<float>("db", {cols}, std::vector<float>(static_cast<std::size_t>(cols), NAN));
      column_sums_leaf_tree(leaf, y.matrix(rows), db.data);
      const auto got = to_host(db.data);
      EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0)
          << rows << " x " << cols << " in leaves of " << leaf << ", " << threads << " threads";
    }
  }
  set_blas_threads(threads_before);
}

/// Mean cross-entropy and its gradient in double on the host.
double reference_ce(const std::vector<double>& z, const std::vector<std::int32_t>& labels,
                    std::int64_t k, double global_batch, std::vector<double>& grad) {
  const std::size_t rows = labels.size();
  grad.assign(z.size(), 0.0);
  double loss = 0.0;
  for (std::size_t i = 0; i < rows; ++i) {
    double m = z[i * k];
    for (std::int64_t j = 1; j < k; ++j) m = std::max(m, z[i * k + j]);
    double s = 0.0;
    for (std::int64_t j = 0; j < k; ++j) s += std::exp(z[i * k + j] - m);
    loss += (m + std::log(s) - z[i * k + labels[i]]) / global_batch;
    for (std::int64_t j = 0; j < k; ++j) {
      grad[i * k + j] = (std::exp(z[i * k + j] - m) / s - (j == labels[i] ? 1 : 0)) / global_batch;
    }
  }
  return loss;
}

Labels make_labels(const std::vector<std::int32_t>& h) {
  Labels l("labels", h.size());
  from_host(l, h);
  return l;
}

TEST(SoftmaxCrossEntropy, FloatMatchesFloat64Reference) {
  const std::int64_t rows = 9, k = 7;
  const std::vector<std::int32_t> hl{0, 6, 3, 3, 1, 5, 2, 4, 0};
  const auto z = random_tensor<float>("z", {rows, k}, 21, -5.0, 5.0);
  auto dz = make_tensor<float>("dz", {rows, k});
  const double loss = softmax_cross_entropy(z, make_labels(hl), rows, dz);
  const auto hz = to_host(z.data);
  std::vector<double> ref_grad;
  const double ref = reference_ce(std::vector<double>(hz.begin(), hz.end()), hl, k, rows, ref_grad);
  EXPECT_NEAR(loss, ref, 1e-6 * ref);
  const auto g = to_host(dz.data);
  for (std::size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], ref_grad[i], 1e-7);
}

TEST(SoftmaxCrossEntropy, StableForHugeLogits) {
  const std::vector<float> base{1.f, 2.f, 3.f, 0.5f};
  std::vector<float> shifted;
  for (float v : base) shifted.push_back(v + 1000.f);  // exp would overflow without the shift
  auto dz = make_tensor<float>("dz", {1, 4});
  const Labels l = make_labels({2});
  const double a = softmax_cross_entropy(tensor_from_host<float>("a", {1, 4}, base), l, 1, dz);
  const double b = softmax_cross_entropy(tensor_from_host<float>("b", {1, 4}, shifted), l, 1, dz);
  ASSERT_TRUE(std::isfinite(b));
  EXPECT_NEAR(a, b, 1e-4);
}

TEST(SoftmaxCrossEntropy, GradientMatchesFiniteDifferences) {
  const std::int64_t rows = 4, k = 5;
  const auto z = random_tensor<double>("z", {rows, k}, 22, -2.0, 2.0);
  auto dz = make_tensor<double>("dz", {rows, k});
  const Labels l = make_labels({1, 4, 0, 2});
  softmax_cross_entropy(z, l, 10, dz);
  auto scratch = make_tensor<double>("scratch", {rows, k});
  expect_gradient_matches("softmax_ce", z.data, to_host(dz.data),
                          [&] { return softmax_cross_entropy(z, l, 10, scratch); });
}

TEST(SoftmaxCrossEntropy, RankPartsSumToTheGlobalMean) {
  const std::int64_t k = 3;
  const std::vector<std::int32_t> hl{0, 1, 2, 1, 0, 2};
  const auto hz = random_values<double>(18, 23, -3, 3);
  auto dz = make_tensor<double>("dz", {6, k});
  const double whole =
      softmax_cross_entropy(tensor_from_host<double>("z", {6, k}, hz), make_labels(hl), 6, dz);
  auto dz2 = make_tensor<double>("dz2", {2, k});
  double parts = 0.0;
  for (int r = 0; r < 3; ++r) {  // three "ranks" with two rows each
    const std::vector<double> zr(hz.begin() + r * 6, hz.begin() + r * 6 + 6);
    parts += softmax_cross_entropy(tensor_from_host<double>("zr", {2, k}, zr),
                                   make_labels({hl[2 * r], hl[2 * r + 1]}), 6, dz2);
    const auto g = to_host(dz2.data), full = to_host(dz.data);
    for (int i = 0; i < 6; ++i) EXPECT_DOUBLE_EQ(g[i], full[r * 6 + i]);
  }
  EXPECT_NEAR(parts, whole, 1e-14);
}

TEST(SoftmaxCrossEntropy, RejectsBadLabelsAndBatch) {
  const auto z = make_tensor<float>("z", {2, 3});
  auto dz = make_tensor<float>("dz", {2, 3});
  EXPECT_THROW(softmax_cross_entropy(z, make_labels({0, 3}), 2, dz), Error);
  EXPECT_THROW(softmax_cross_entropy(z, make_labels({0, -1}), 2, dz), Error);
  EXPECT_THROW(softmax_cross_entropy(z, make_labels({0, 1}), 1, dz), Error);
  EXPECT_THROW(softmax_cross_entropy(z, make_labels({0}), 2, dz), Error);
}

TEST(SoftmaxCrossEntropy, CountCorrect) {
  const auto z = tensor_from_host<float>("z", {3, 3}, {0, 5, 1, 9, 1, 2, 0, 0, -1});
  EXPECT_EQ(count_correct(z, make_labels({1, 0, 2})), 2);
}

TEST(Dropout, DropsTheRateAndScalesTheRest) {
  const std::int64_t n = 200, per = 100;
  auto x = make_tensor<float>("x", {n, per});
  fill(x.data, 1.f);
  auto y = make_tensor<float>("y", {n, per});
  dropout_apply(DropoutKey{7, 3, 0}, 0.3, per, x.data, y.data);
  std::int64_t zeros = 0;
  for (float v : to_host(y.data)) {
    if (v == 0.f) ++zeros; else EXPECT_FLOAT_EQ(v, 1.f / 0.7f);
  }
  EXPECT_NEAR(static_cast<double>(zeros) / (n * per), 0.3, 0.015);  // ~5 sigma for 20000 draws
}

TEST(Dropout, MaskDependsOnlyOnGlobalSampleNotOnSplit) {
  const std::int64_t n = 16, per = 9;
  const auto x = random_tensor<double>("x", {n, per}, 31);
  auto whole = make_tensor<double>("whole", {n, per});
  dropout_apply(DropoutKey{5, 2, 100}, 0.5, per, x.data, whole.data);
  const auto hx = to_host(x.data), hw = to_host(whole.data);
  for (std::int64_t first : {0, 5, 11}) {  // a "rank" holding samples [first, n)
    const std::vector<double> part(hx.begin() + first * per, hx.end());
    const auto xp = tensor_from_host<double>("xp", {n - first, per}, part);
    auto yp = make_tensor<double>("yp", {n - first, per});
    dropout_apply(DropoutKey{5, 2, 100 + first}, 0.5, per, xp.data, yp.data);
    const auto hy = to_host(yp.data);
    for (std::size_t i = 0; i < hy.size(); ++i) EXPECT_EQ(hy[i], hw[first * per + i]);
  }
  auto other = make_tensor<double>("other", {n, per});
  dropout_apply(DropoutKey{5, 3, 100}, 0.5, per, x.data, other.data);  // next step: new mask
  EXPECT_NE(to_host(other.data), hw);
}

}  // namespace
}  // namespace hpctrain::core
