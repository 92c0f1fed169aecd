// Counter-based RNG and parameter initialisation: values depend only on (seed, parameter, index).
#include "gradient_check.hpp"
#include "hpctrain/base/error.hpp"
#include "hpctrain/core/counter_rng.hpp"
#include "hpctrain/core/init.hpp"

#include <gtest/gtest.h>

#include <cmath>

namespace hpctrain::core {
namespace {

std::vector<double> init_values(Init init, std::int64_t n, std::uint64_t seed, std::uint64_t id,
                                std::int64_t fan_in = 50, std::int64_t fan_out = 30) {
  Vec<double> v("v", static_cast<std::size_t>(n));
  initialize(v, init, fan_in, fan_out, seed, id);
  return to_host(v);
}

TEST(CounterRng, KnownSplitmix64Values) {
  // Reference outputs of splitmix64 seeded with 0 (Vigna's splitmix64.c): state += golden
  // ratio before mixing, so the first two outputs are mix(1 * gamma) and mix(2 * gamma).
  EXPECT_EQ(splitmix64(0), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(splitmix64(0x9E3779B97F4A7C15ull), 0x6E789E6AA1B965F4ull);
}

TEST(CounterRng, UniformIsInUnitIntervalWithMeanOneHalf) {
  double sum = 0.0;
  const int n = 100000;
  for (int i = 0; i < n; ++i) {
    const double u = uniform01(counter_hash(1, 2, static_cast<std::uint64_t>(i)));
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  EXPECT_NEAR(sum / n, 0.5, 0.005);  // sd of the mean is 0.0009
}

TEST(Init, ValueDependsOnlyOnSeedParameterAndIndex) {
  for (const Init init : {Init::he_normal, Init::xavier_uniform}) {
    const auto a = init_values(init, 1000, 7, 3);
    EXPECT_EQ(a, init_values(init, 1000, 7, 3));  // reproducible
    const auto shorter = init_values(init, 10, 7, 3);  // independent of the buffer length
    EXPECT_TRUE(std::equal(shorter.begin(), shorter.end(), a.begin()));
    const auto other_seed = init_values(init, 1000, 8, 3);
    const auto other_param = init_values(init, 1000, 7, 4);
    int same_seed = 0, same_param = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      same_seed += a[i] == other_seed[i];
      same_param += a[i] == other_param[i];
    }
    EXPECT_EQ(same_seed, 0);
    EXPECT_EQ(same_param, 0);
  }
}

TEST(Init, HeNormalHasTheRightMoments) {
  const std::int64_t fan_in = 50;
  const auto v = init_values(Init::he_normal, 20000, 1, 0, fan_in);
  double mean = 0.0, sq = 0.0;
  for (double x : v) { mean += x; sq += x * x; }
  mean /= v.size();
  const double var = sq / v.size() - mean * mean;
  const double want = 2.0 / fan_in;
  EXPECT_NEAR(mean, 0.0, 5 * std::sqrt(want / v.size()));
  EXPECT_NEAR(var, want, 0.05 * want);  // sd of the sample variance is ~1% here
}

TEST(Init, XavierUniformIsBoundedWithTheRightVariance) {
  const std::int64_t fan_in = 50, fan_out = 30;
  const double a = std::sqrt(6.0 / (fan_in + fan_out));
  const auto v = init_values(Init::xavier_uniform, 20000, 2, 1, fan_in, fan_out);
  double sq = 0.0;
  for (double x : v) {
    ASSERT_LE(std::fabs(x), a);
    sq += x * x;
  }
  EXPECT_NEAR(sq / v.size(), a * a / 3.0, 0.05 * a * a / 3.0);
}

TEST(Init, ZerosAndParsing) {
  for (double x : init_values(Init::zeros, 5, 1, 1)) EXPECT_EQ(x, 0.0);
  EXPECT_EQ(parse_init("he"), Init::he_normal);
  EXPECT_EQ(parse_init("xavier"), Init::xavier_uniform);
  EXPECT_THROW(parse_init("glorot?"), Error);
}

}  // namespace
}  // namespace hpctrain::core
