#pragma once
/// @file
/// A stateless, counter-based random number generator usable inside kernels.
///
/// Every random number is a pure function of a key tuple, e.g. (seed, parameter id, element)
/// for initialisation or (seed, layer, step, global sample, element) for dropout. The value
/// therefore does not depend on the execution order, the backend, the thread count or how the
/// data is split across ranks. (Kokkos::Random keeps per-thread state and has none of these
/// properties.)
///
/// The mixer is splitmix64 (Steele, Lea, Flood 2014; the finaliser of Java's SplittableRandom);
/// a tuple is hashed by chaining it. Its output passes BigCrush as a counter-mode generator.

#include "hpctrain/core/kokkos_compat.hpp"

#include <cstdint>

namespace hpctrain::core {

KOKKOS_INLINE_FUNCTION std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// Hash of a key tuple; distinct tuples give independent-looking outputs.
KOKKOS_INLINE_FUNCTION std::uint64_t counter_hash(std::uint64_t a, std::uint64_t b,
                                                  std::uint64_t c = 0, std::uint64_t d = 0) {
  std::uint64_t h = splitmix64(a);
  h = splitmix64(h ^ b);
  h = splitmix64(h ^ c);
  return splitmix64(h ^ d);
}

/// Uniform in [0, 1) from the top 53 bits of a hash.
KOKKOS_INLINE_FUNCTION double uniform01(std::uint64_t h) {
  return static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0);
}

/// Standard normal from two hashes (Box-Muller; u1 is kept in (0, 1] so log is finite).
KOKKOS_INLINE_FUNCTION double standard_normal(std::uint64_t h1, std::uint64_t h2) {
  const double u1 = 1.0 - uniform01(h1);
  const double u2 = uniform01(h2);
  const double two_pi = 6.283185307179586;
  return kmath::sqrt(-2.0 * kmath::log(u1)) * kmath::cos(two_pi * u2);
}

}  // namespace hpctrain::core
