// Array forms of the bfloat16 conversions and the bfloat16 sum (types.hpp, reduce.hpp).
//
// Why a file of their own: the element functions are branch-free, but this project builds for
// the baseline x86-64 ISA at -O2, where GCC 12 vectorises only loops whose trip count is known.
// These loops run over every gradient element of a 16-bit all-reduce (cast to the wire, the sum
// in the reduction, cast back), so this file is compiled with -O3 and each kernel is cloned for
// AVX-512 and AVX2 (vector_clones.hpp). Same values on every path: the arithmetic is the element
// functions'.
#include "hpctrain/collectives/types.hpp"
#include "reduce.hpp"
#include "hpctrain/base/vector_clones.hpp"


namespace hpctrain::coll {

HPCTRAIN_VECTOR_CLONES void to_bf16(const float* __restrict in, bf16* __restrict out, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) out[i] = to_bf16(in[i]);
}

HPCTRAIN_VECTOR_CLONES void to_float(const bf16* __restrict in, float* __restrict out, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) out[i] = to_float(in[i]);
}

namespace detail {

HPCTRAIN_VECTOR_CLONES void sum_bf16(bf16* out, const bf16* a, const bf16* b, std::size_t n) noexcept {
  // Element i reads a[i] and b[i] before it writes out[i], so out may be a (or b): in blocks, so
  // the compiler may vectorise without proving the arrays apart.
  constexpr std::size_t kBlock = 64;
  float sum[kBlock];
  std::size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    for (std::size_t j = 0; j < kBlock; ++j) sum[j] = to_float(a[i + j]) + to_float(b[i + j]);
    for (std::size_t j = 0; j < kBlock; ++j) out[i + j] = to_bf16(sum[j]);
  }
  for (; i < n; ++i) out[i] = to_bf16(to_float(a[i]) + to_float(b[i]));
}

}  // namespace detail

}  // namespace hpctrain::coll
