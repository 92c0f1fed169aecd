#pragma once
// Internal to hpctrain::core: the oneDNN matmul behind core::gemm / core::linear_forward (float,
// host memory). Built only with HPCTRAIN_ENABLE_ONEDNN; gemm.cpp dispatches to it.

#include <array>
#include <cstdint>

#include "gemm_operand.hpp"

namespace hpctrain::core::onednn {

using detail::MatrixOperand;

/// c[m x n] = op(a)[m x k] op(b)[k x n] (+ beta c when beta != 0) (+ bias[n] on every row when
/// bias is not null; then beta must be 0). Row-major c with leading dimension ldc.
void gemm(std::int64_t m, std::int64_t n, std::int64_t k, MatrixOperand a, MatrixOperand b,
          float beta, float* c, std::int64_t ldc, const float* bias);

/// Extents of a batched product: outer x inner products of [m, k] x [k, n] -> [m, n].
struct BatchedShape {
  std::int64_t outer, inner, m, n, k;
};

/// A [outer, inner, rows, cols] float operand at `data` with element strides
/// {outer, inner, row, col}.
struct StridedOperand {
  const float* data;
  std::array<std::int64_t, 4> strides;
};

/// c = alpha a b (+ beta c when beta != 0) for every (outer, inner) matrix pair: one oneDNN
/// matmul with 4-D strided memory descriptors (c.data is written).
void batched_gemm(const BatchedShape& shape, float alpha, StridedOperand a, StridedOperand b,
                  float beta, StridedOperand c);

}  // namespace hpctrain::core::onednn
