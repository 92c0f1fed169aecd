#pragma once
// Internal to hpctrain::core: a row-major float matrix operand as the vendor gemm paths
// (gemm_onednn, gemm_libxsmm) take it.

#include <cstdint>

namespace hpctrain::core::detail {

/// A row-major float matrix operand: `rows x cols` of op(X), stored with leading dimension `ld`
/// (the row stride of X as stored), transposed when `trans`.
struct MatrixOperand {
  const float* data;
  std::int64_t ld;
  bool trans;
};

}  // namespace hpctrain::core::detail
