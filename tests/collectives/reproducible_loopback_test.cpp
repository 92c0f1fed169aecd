// The reproducible sum over the loopback transport (ranks are threads), 1..16 ranks: the K = 16
// terms of reproducible_terms.hpp spread over P ranks give the same bits for every P and every
// algorithm, and stay within the stated error bound of a float64 reference.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <iterator>
#include <limits>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "hpctrain/base/error.hpp"
#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/collectives/loopback_transport.hpp"
#include "hpctrain/collectives/reproducible_sum.hpp"
#include "loopback_ranks.hpp"
#include "reproducible_terms.hpp"

namespace hpctrain::coll {
namespace {

using namespace testing;

void run_ranks(int ranks, const std::function<void(Communicator&)>& fn) {
  Tuning tuning;
  tuning.timeout_s = 60;
  tuning.ring_segment_bytes = 1024;  // several ring/tree segments even for these small buffers
  run_loopback_ranks(ranks, tuning, fn);
}

/// Every rank's result of the K terms split over `ranks` ranks, reduced with `algo`.
template <class T>
std::vector<std::vector<T>> sum_terms(int ranks, Algorithm algo, std::vector<int>* scales = nullptr) {
  std::vector<std::vector<T>> out(static_cast<std::size_t>(ranks));
  run_ranks(ranks, [&](Communicator& comm) {
    out[static_cast<std::size_t>(comm.rank())] =
        sum_on<T>(comm, algo, /*reverse=*/true, scales && comm.rank() == 0 ? scales : nullptr);
  });
  return out;
}

template <class T>
void check_identical_everywhere() {
  std::vector<int> scales;
  const std::vector<T> first = sum_terms<T>(1, Algorithm::ring, &scales)[0];
  // Within the stated bound of the float64 reference.
  const auto ref = reference_sum<T>();
  // The scales derived independently: s_b = 62 - E_b - ceil(lg K), max |x| in block < 2^E_b.
  std::vector<int> exponent(scales.size(), std::numeric_limits<int>::min());
  for (int k = 0; k < kTerms; ++k) {
    const auto t = make_term<T>(k);
    for (std::size_t i = 0; i < kCount; ++i) {
      int e = 0;
      std::frexp(t[i], &e);
      exponent[i / kBlock] = std::max(exponent[i / kBlock], e);
    }
  }
  for (std::size_t b = 0; b < scales.size(); ++b) ASSERT_EQ(scales[b], 62 - exponent[b] - 4) << "block " << b;
  double worst_ratio = 0;
  for (std::size_t i = 0; i < kCount; ++i) {
    const std::size_t b = i / kBlock;
    const int s = 62 - exponent[b] - 4;
    const double bound = static_cast<double>(kTerms) * std::ldexp(1.0, -s - 1) * (1.0 + std::ldexp(1.0, -20)) +
                         (std::ldexp(1.0, -std::numeric_limits<T>::digits) + std::ldexp(1.0, -52)) * std::fabs(ref[i]) +
                         static_cast<double>(std::numeric_limits<T>::denorm_min());
    const double err = std::fabs(static_cast<double>(first[i]) - ref[i]);
    ASSERT_LE(err, bound) << "element " << i << " result " << first[i] << " reference " << ref[i];
    worst_ratio = std::max(worst_ratio, err / bound);
  }
  std::printf("worst |error| / bound: %.3g\n", worst_ratio);
  for (int p = 1; p <= 16; ++p) {
    for (Algorithm algo : reproducible_algorithms(/*vendor_available=*/false)) {
      const auto all = sum_terms<T>(p, algo);
      for (int r = 0; r < p; ++r) {
        ASSERT_TRUE(same_bits(all[static_cast<std::size_t>(r)], first))
            << "P=" << p << " rank " << r << " algorithm " << to_string(algo);
      }
    }
  }
}

TEST(ReproducibleSumLoopback, FloatIdenticalBitsForEveryRankCountAndAlgorithm) { check_identical_everywhere<float>(); }
TEST(ReproducibleSumLoopback, DoubleIdenticalBitsForEveryRankCountAndAlgorithm) { check_identical_everywhere<double>(); }

// The test above can fail: with an ordinary float all-reduce these terms give different bits
// for different splits (floating-point addition is not associative).
TEST(ReproducibleSumLoopback, OrdinaryFloatSumDependsOnTheSplit) {
  std::vector<float> in_order(kCount, 0.f), reversed(kCount, 0.f);
  for (int k = 0; k < kTerms; ++k) {
    const auto t = make_term<float>(k);
    const auto u = make_term<float>(kTerms - 1 - k);
    for (std::size_t i = 0; i < kCount; ++i) {
      in_order[i] += t[i];
      reversed[i] += u[i];
    }
  }
  EXPECT_FALSE(same_bits(in_order, reversed));
}

TEST(ReproducibleSumLoopback, CommunicatorCallOneTermPerRank) {
  // allreduce_reproducible: term r on rank r; every algorithm gives the same bits, within bound.
  for (int p : {1, 2, 3, 5, 16}) {
    std::vector<std::vector<float>> results;
    for (Algorithm algo : reproducible_algorithms(false)) {
      std::vector<std::vector<float>> out(static_cast<std::size_t>(p));
      run_ranks(p, [&](Communicator& comm) {
        auto x = make_term<float>(comm.rank());
        std::vector<float> y(kCount);
        comm.allreduce_reproducible(x.data(), y.data(), kCount, algo, kBlock);
        out[static_cast<std::size_t>(comm.rank())] = y;
      });
      for (int r = 1; r < p; ++r) ASSERT_TRUE(same_bits(out[static_cast<std::size_t>(r)], out[0]));
      results.push_back(out[0]);
    }
    for (const auto& r : results) ASSERT_TRUE(same_bits(r, results[0])) << "P=" << p;
    // The float64 reference and the stated bound, with the block scale derived here
    // independently: s_b = 62 - E_b - ceil(lg P), max |x| over the block < 2^E_b.
    std::vector<double> ref(kCount, 0.0);
    std::vector<int> exponent((kCount + kBlock - 1) / kBlock, std::numeric_limits<int>::min());
    for (int r = 0; r < p; ++r) {
      const auto t = make_term<float>(r);
      for (std::size_t i = 0; i < kCount; ++i) {
        ref[i] += t[i];
        int e = 0;
        std::frexp(t[i], &e);
        exponent[i / kBlock] = std::max(exponent[i / kBlock], e);
      }
    }
    int headroom = 0;
    while ((1 << headroom) < p) ++headroom;
    for (std::size_t i = 0; i < kCount; ++i) {
      const int s = 62 - exponent[i / kBlock] - headroom;
      const double bound = p * std::ldexp(1.0, -s - 1) * (1 + std::ldexp(1.0, -20)) +
                           (std::ldexp(1.0, -24) + std::ldexp(1.0, -52)) * std::fabs(ref[i]);
      ASSERT_LE(std::fabs(results[0][i] - ref[i]), bound) << "P=" << p << " element " << i;
    }
  }
}

TEST(ReproducibleSumLoopback, NonFiniteBlockIsNaNEverywhere) {
  run_ranks(3, [](Communicator& comm) {
    std::vector<double> x(10, 1.0);
    if (comm.rank() == 1) x[7] = std::numeric_limits<double>::infinity();
    std::vector<double> y(10);
    comm.allreduce_reproducible(x.data(), y.data(), x.size(), Algorithm::ring, 5);
    for (int i = 0; i < 5; ++i) EXPECT_EQ(y[static_cast<std::size_t>(i)], 3.0);
    for (int i = 5; i < 10; ++i) EXPECT_TRUE(std::isnan(y[static_cast<std::size_t>(i)]));
  });
}

TEST(ReproducibleSumLoopback, ZeroAndEmpty) {
  run_ranks(4, [](Communicator& comm) {
    std::vector<float> x(9, 0.f), y(9, 5.f);
    comm.allreduce_reproducible(x.data(), y.data(), x.size());
    for (float v : y) EXPECT_EQ(v, 0.f);
    comm.allreduce_reproducible(static_cast<const float*>(nullptr), static_cast<float*>(nullptr), 0);
  });
}

/// The scalar path written out here, independently of the library's kernels: per block the
/// scale from the agreed exponent, q = llround(x * 2^s) (half away from zero, exact in double),
/// an int64 sum over the terms, one conversion back.
template <class T>
std::vector<T> scalar_fixed_point_sum(const std::vector<std::vector<T>>& terms, const std::vector<std::size_t>& ends,
                                      const std::vector<int>& scale) {
  std::vector<T> out(ends.back());
  std::size_t begin = 0;
  for (std::size_t b = 0; b < ends.size(); ++b) {
    for (std::size_t i = begin; i < ends[b]; ++i) {
      std::int64_t q = 0;
      for (const auto& t : terms) q += std::llround(std::ldexp(static_cast<double>(t[i]), scale[b]));
      out[i] = static_cast<T>(std::ldexp(static_cast<double>(q), -scale[b]));
    }
    begin = ends[b];
  }
  return out;
}

/// Terms of `count` elements, magnitudes over 40 binades, random signs; `salt` varies them.
template <class T>
std::vector<std::vector<T>> chunky_terms(int k, std::size_t count, unsigned salt) {
  std::vector<std::vector<T>> terms;
  for (int t = 0; t < k; ++t) {
    std::mt19937_64 rng(salt * 1000u + static_cast<unsigned>(t));
    std::vector<T> v(count);
    for (std::size_t i = 0; i < count; ++i) {
      const double u = static_cast<double>(rng() >> 11) * 0x1p-53;
      // Elements from 4501 on are 2^-100 smaller: their block's scale 2^s is beyond float's
      // range (s > 127), so float terms take add_terms' double path there, the float path elsewhere.
      const int tiny = i >= 4501 ? -100 : 0;
      v[i] = static_cast<T>(((rng() & 1) ? 1.0 : -1.0) * (0.5 + u) *
                            std::ldexp(1.0, static_cast<int>((i * 7 + t) % 40) - 20 + tiny));
    }
    // Ties for the rounding: block 0's largest term is < 2^20, so its scale is 2^(62-20-4) and
    // +-(t + 1/2) * 2^-38 become exact halves of the fixed-point unit.
    for (std::size_t i = 1; i < 40; i += 2) v[i] = static_cast<T>(std::ldexp((i % 4 == 1 ? 1 : -1) * (t + 0.5), -38));
    // Fixed-point values next to the rounding's case boundaries (each exact in float).
    const double edges[] = {0.5 - 0x1p-25, 0.5, 0.5 + 0x1p-24, 1 - 0x1p-24, 1.5 - 0x1p-23, 2.5, 0.25 + 0x1p-26,
                            0x1p-30,       0x1p22 + 0.5, 0x1p23 - 0.5, 0x1p23 + 1, 0x1p24 + 2, 3.5 - 0x1p-22};
    for (std::size_t j = 0; j < std::size(edges); ++j) {
      v[40 + 2 * j] = static_cast<T>(std::ldexp(edges[j], -38));
      v[41 + 2 * j] = static_cast<T>(std::ldexp(-edges[j], -38));
    }
    terms.push_back(std::move(v));
  }
  return terms;
}

template <class T>
void check_fused_kernels() {
  // Blocks longer than add_terms' 2048-element chunk and not multiples of it, so chunk
  // boundaries fall inside blocks and the last chunk of each block is partial.
  const std::vector<std::size_t> ends = {4500, 4501, 10077};  // scales ~2^37, ~2^37, ~2^137
  const std::size_t count = ends.back();
  constexpr int k = 13;
  // Rank 0 holds all terms, rank 1 none (its accumulator must count as zero); two rounds on
  // the same instance, so stale accumulator values of round 1 would show in round 2.
  for (unsigned round = 1; round <= 2; ++round) {
    const auto terms = chunky_terms<T>(k, count, round);
    std::vector<std::vector<T>> results(2), one_by_one(2);
    std::vector<int> scale;
    run_ranks(2, [&](Communicator& comm) {
      const auto r = static_cast<std::size_t>(comm.rank());
      ReproducibleSum<T> fused(count, ends, k), plain(count, ends, k);
      for (unsigned warm = 0; warm < round; ++warm) {  // round 2: the instances were used before
        std::vector<std::vector<T>> copies(terms.size(), std::vector<T>(count, T(-1)));
        std::vector<const T*> ptrs;
        fused.reset();
        plain.reset();
        if (r == 0) {
          for (std::size_t t = 0; t < terms.size(); ++t) {
            fused.observe_copy(terms[t].data(), copies[t].data());
            ASSERT_TRUE(same_bits(copies[t], terms[t])) << "observe_copy's copy of term " << t;
            plain.observe(terms[t].data());
            ptrs.push_back(copies[t].data());
          }
        }
        fused.agree_scales(comm);
        plain.agree_scales(comm);
        if (r == 0) {
          // In two calls (5 + 8 terms), the second adding onto the first.
          fused.add_terms(ptrs.data(), 5);
          fused.add_terms(ptrs.data() + 5, ptrs.size() - 5);
          for (const auto& t : terms) plain.add(t.data());
        }
        results[r].assign(count, T(0));
        one_by_one[r].assign(count, T(0));
        fused.finish(comm, results[r].data(), Algorithm::ring);
        plain.finish(comm, one_by_one[r].data(), Algorithm::ring);
      }
      if (r == 0) {
        for (std::size_t b = 0; b < ends.size(); ++b) scale.push_back(fused.scale_exponent(b));
        ASSERT_LE(scale[0], 127);  // the float path is exercised
        ASSERT_GT(scale[2], 127);  // and the double path
      }
    });
    int ties = 0;
    for (const auto& t : terms) {
      for (std::size_t i = 0; i < ends[0]; ++i) {
        const double y = std::ldexp(static_cast<double>(t[i]), scale[0]);
        ties += std::fabs(y - std::trunc(y)) == 0.5;
      }
    }
    ASSERT_GE(ties, 100) << "the terms must hold exact halves of the fixed-point unit";
    const auto reference = scalar_fixed_point_sum(terms, ends, scale);
    for (std::size_t r = 0; r < 2; ++r) {
      ASSERT_TRUE(same_bits(results[r], reference)) << "round " << round << " rank " << r;
      ASSERT_TRUE(same_bits(one_by_one[r], reference)) << "round " << round << " rank " << r;
    }
  }
}

TEST(ReproducibleSumLoopback, FusedKernelsSameBitsAsScalarPathFloat) { check_fused_kernels<float>(); }
TEST(ReproducibleSumLoopback, FusedKernelsSameBitsAsScalarPathDouble) { check_fused_kernels<double>(); }

TEST(ReproducibleSumLoopback, BadLayoutIsRejectedByName) {
  EXPECT_THROW(ReproducibleSum<float>(10, {4, 3, 10}, 2), Error);
  EXPECT_THROW(ReproducibleSum<float>(10, {4, 9}, 2), Error);
  EXPECT_THROW(ReproducibleSum<float>(10, {}, 0), Error);
}

}  // namespace
}  // namespace hpctrain::coll
