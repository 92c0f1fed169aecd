// centroid_dots_f32 (the float dots of k-means' assignment) must have, in the clone the CPU runs,
// the bits of the 16-lane sum and fixed tree it documents, for every tile shape and feature tail;
// nearest_centroids_f32 must then pick what the f64 search picks away from near ties, with the
// same f64 distances and sums.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "hpctrain/ml/dataset_slice.hpp"
#include "hpctrain/ml/kmeans.hpp"

namespace hpctrain::ml {
namespace {

/// The documented dot in baseline scalar code: lane l adds the products of features j = l mod 16,
/// then s8[i] = l[i] + l[i+8], s4[i] = s8[i] + s8[i+4], s2[i] = s4[i] + s4[i+2], s2[0] + s2[1].
float lane_tree_dot(const float* x, const float* c, std::int64_t d) {
  volatile float lane[16] = {};  // volatile: the reference stays scalar, in this order
  for (std::int64_t j = 0; j < d; ++j) {
    const float product = x[j] * c[j];
    lane[j % 16] = lane[j % 16] + product;
  }
  float s8[8], s4[4], s2[2];
  for (int i = 0; i < 8; ++i) s8[i] = lane[i] + lane[i + 8];
  for (int i = 0; i < 4; ++i) s4[i] = s8[i] + s8[i + 4];
  for (int i = 0; i < 2; ++i) s2[i] = s4[i] + s4[i + 2];
  return s2[0] + s2[1];
}

TEST(CentroidDots, WidestCloneHasTheBitsOfTheLaneTree) {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  // rows: odd and even (the 2-row tile and the row left); k: every remainder of the 5-centroid
  // tile; d: below, at and past one 16-lane chunk, and Fashion-MNIST's 784.
  for (const std::int64_t rows : {1, 2, 5}) {
    for (std::int64_t k = 1; k <= 12; ++k) {
      for (const std::int64_t d : {1, 15, 16, 17, 100, 784}) {
        std::vector<float> x(static_cast<std::size_t>(rows * d)), c(static_cast<std::size_t>(k * d));
        for (std::size_t j = 0; j < x.size(); ++j) x[j] = u(rng) * std::ldexp(1.0f, static_cast<int>(j % 30) - 15);
        for (float& v : c) v = u(rng);
        std::vector<float> dots(static_cast<std::size_t>(rows * k), NAN);
        centroid_dots_f32(x.data(), rows, d, c.data(), k, dots.data());
        for (std::int64_t i = 0; i < rows; ++i) {
          for (std::int64_t t = 0; t < k; ++t) {
            const float expected = lane_tree_dot(x.data() + i * d, c.data() + t * d, d);
            const float got = dots[static_cast<std::size_t>(i * k + t)];
            EXPECT_EQ(std::memcmp(&got, &expected, sizeof got), 0)
                << "rows " << rows << " k " << k << " d " << d << " dot (" << i << ", " << t << "): " << got
                << " vs " << expected;
          }
        }
      }
    }
  }
}

TEST(NearestCentroidsF32, PicksTheF64CentroidAwayFromTiesWithTheSameDistancesAndSums) {
  constexpr std::int64_t k = 10, d = 37, rows = 1000;
  std::mt19937_64 rng(5);
  std::normal_distribution<double> g(0.0, 1.0);
  std::vector<double> centroids(static_cast<std::size_t>(k * d));
  for (double& v : centroids) v = 4.0 * g(rng);
  DatasetSlice data;
  data.features = d;
  data.rows = data.total_samples = rows;
  data.samples.resize(static_cast<std::size_t>(rows * d));
  for (std::int64_t i = 0; i < rows; ++i) {
    const std::int64_t c = (i * 7) % k;
    for (std::int64_t j = 0; j < d; ++j) {
      data.samples[static_cast<std::size_t>(i * d + j)] = centroids[static_cast<std::size_t>(c * d + j)] + 0.3 * g(rng);
    }
  }
  std::vector<std::int64_t> label64(rows), label32(rows);
  std::vector<double> d2_64(rows), d2_32(rows), sums64(centroids.size(), 0.0), sums32(centroids.size(), 0.0);
  nearest_centroids(data, 0, rows, centroids, k, label64.data(), d2_64.data(), sums64.data());
  nearest_centroids_f32(data, 0, rows, centroids, k, label32.data(), d2_32.data(), sums32.data());
  for (std::int64_t i = 0; i < rows; ++i) EXPECT_EQ(label32[i], (i * 7) % k) << "row " << i;
  EXPECT_EQ(label32, label64);
  EXPECT_EQ(std::memcmp(d2_32.data(), d2_64.data(), rows * sizeof(double)), 0);
  EXPECT_EQ(std::memcmp(sums32.data(), sums64.data(), sums64.size() * sizeof(double)), 0);
}

}  // namespace
}  // namespace hpctrain::ml
