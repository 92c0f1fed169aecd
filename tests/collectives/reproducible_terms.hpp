#pragma once
// Shared by the reproducible all-reduce tests: the algorithms under test (one list), K global
// terms of random data with mixed magnitudes and cancellation, a float64 reference, and the
// split of the K terms over P ranks.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/collectives/reproducible_sum.hpp"
#include "hpctrain/collectives/types.hpp"

namespace hpctrain::coll::testing {

/// The algorithms the reproducible sum is checked with: every all-reduce algorithm.
inline std::vector<Algorithm> reproducible_algorithms(bool vendor_available) {
  std::vector<Algorithm> a = {Algorithm::ring, Algorithm::tree, Algorithm::automatic, Algorithm::recursive_doubling,
                             Algorithm::rabenseifner, Algorithm::shm, Algorithm::hierarchical};
  if (vendor_available) a.push_back(Algorithm::mpi);
  return a;
}

constexpr int kTerms = 16;             // K: global terms (e.g. micro-shards)
constexpr std::size_t kCount = 1031;   // elements per term (odd: partial last block)
constexpr std::size_t kBlock = 128;    // elements per scale block

/// Term k (the same on every rank and platform: mt19937_64 is fully specified). Element i of
/// every term has magnitude ~2^(i % 40 - 20) times a block-dependent factor, with random signs,
/// so sums cancel and magnitudes inside a block span many binades.
template <class T>
std::vector<T> make_term(int k) {
  std::mt19937_64 rng(0x5eed0000u + static_cast<unsigned>(k));
  std::vector<T> t(kCount);
  for (std::size_t i = 0; i < kCount; ++i) {
    const double u = static_cast<double>(rng() >> 11) * 0x1p-53;  // [0, 1)
    const double sign = (rng() & 1) ? 1.0 : -1.0;
    t[i] = static_cast<T>(sign * (0.5 + u) * std::ldexp(1.0, static_cast<int>(i % 40) - 20));
  }
  return t;
}

/// Exact-enough float64 reference: sum of the K terms in long double (the terms are floats
/// or doubles of limited range here; long double adds 11 bits over double).
template <class T>
std::vector<double> reference_sum() {
  std::vector<long double> s(kCount, 0.0L);
  for (int k = 0; k < kTerms; ++k) {
    const auto t = make_term<T>(k);
    for (std::size_t i = 0; i < kCount; ++i) s[i] += static_cast<long double>(t[i]);
  }
  return std::vector<double>(s.begin(), s.end());
}

/// Terms [first, last) of rank r of P (contiguous, balanced: the trainer's split).
inline std::pair<int, int> my_terms(int rank, int ranks) {
  return {kTerms * rank / ranks, kTerms * (rank + 1) / ranks};
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

/// This rank's terms summed reproducibly over `comm` with `algo`, added in reverse order when
/// `reverse` (the order of adds must not matter). `scales`, when given, receives every block's
/// agreed scale exponent.
template <class T>
std::vector<T> sum_on(Communicator& comm, Algorithm algo, bool reverse = false, std::vector<int>* scales = nullptr) {
  auto sum = ReproducibleSum<T>::with_uniform_blocks(kCount, kBlock, kTerms);
  const auto [first, last] = my_terms(comm.rank(), comm.size());
  std::vector<std::vector<T>> terms;
  for (int k = first; k < last; ++k) terms.push_back(make_term<T>(k));
  for (const auto& t : terms) sum.observe(t.data());
  sum.agree_scales(comm);
  if (reverse) {
    for (auto it = terms.rbegin(); it != terms.rend(); ++it) sum.add(it->data());
  } else {
    for (const auto& t : terms) sum.add(t.data());
  }
  std::vector<T> out(kCount);
  sum.finish(comm, out.data(), algo);
  if (scales) {
    for (std::size_t b = 0; b < sum.blocks(); ++b) scales->push_back(sum.scale_exponent(b));
  }
  return out;
}

}  // namespace hpctrain::coll::testing
