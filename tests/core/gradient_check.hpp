#pragma once
// Test helpers: random device tensors and central finite-difference gradient checks.
//
// Gradient checks run the code under test in double. With eps = 1e-6 a central difference has
// truncation error O(eps^2 f''') ~ 1e-12 and rounding error ~ 1e-16 |L| / eps ~ 1e-10 |L|, so
// a tolerance of 1e-6 (absolute + relative) passes correct gradients with a wide margin while
// any wrong term (a missed factor, sign, index or accumulation) is off by O(1). Kinks (ReLU at
// 0, max-pool ties) are hit only if an input lies within eps of one; fixed seeds and continuous
// random inputs make that a probability-1e-4 event that the fixed seeds avoid.

#include "hpctrain/core/tensor.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace hpctrain::testing {

template <class T>
std::vector<T> random_values(std::size_t n, std::uint32_t seed, double lo = -1.0,
                             double hi = 1.0) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(dist(gen));
  return v;
}

template <class T>
core::Tensor<T> random_tensor(const std::string& label, core::Shape shape, std::uint32_t seed,
                              double lo = -1.0, double hi = 1.0) {
  const auto n = static_cast<std::size_t>(core::shape_size(shape));
  return core::tensor_from_host<T>(label, std::move(shape), random_values<T>(n, seed, lo, hi));
}

/// sum_i w_i t_i in double.
template <class T>
double weighted_sum(const core::Tensor<T>& t, const std::vector<double>& w) {
  const std::vector<T> h = core::to_host(t.data);
  EXPECT_EQ(h.size(), w.size());
  double s = 0.0;
  for (std::size_t i = 0; i < h.size() && i < w.size(); ++i) s += static_cast<double>(h[i]) * w[i];
  return s;
}

/// Compares `analytic` with central differences of `loss` with respect to every element of
/// `values` (or every `stride`-th element for large tensors). `loss` must read `values`.
inline void expect_gradient_matches(const std::string& what, const core::Vec<double>& values,
                                    const std::vector<double>& analytic,
                                    const std::function<double()>& loss, double eps = 1e-6,
                                    double tol = 1e-6, std::size_t stride = 1) {
  std::vector<double> v = core::to_host(values);
  ASSERT_EQ(v.size(), analytic.size()) << what;
  std::size_t checked = 0;
  for (std::size_t i = 0; i < v.size(); i += stride) {
    const double orig = v[i];
    v[i] = orig + eps;
    core::from_host(values, v);
    const double up = loss();
    v[i] = orig - eps;
    core::from_host(values, v);
    const double down = loss();
    v[i] = orig;
    core::from_host(values, v);
    const double fd = (up - down) / (2.0 * eps);
    EXPECT_NEAR(analytic[i], fd, tol * (1.0 + std::fabs(fd))) << what << " element " << i;
    ++checked;
  }
  EXPECT_GT(checked, 0u) << what;
}

}  // namespace hpctrain::testing
