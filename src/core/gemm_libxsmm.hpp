#pragma once
// Internal to hpctrain::core: libxsmm's JIT kernels behind core::gemm / core::linear_forward for
// the small float products of dense layers (host memory). Built only with HPCTRAIN_ENABLE_LIBXSMM;
// gemm.cpp dispatches to it and falls back to oneDNN (or BLAS) for what it does not take.

#include <cstdint>

#include "gemm_operand.hpp"

namespace hpctrain::core::libxsmm {

using detail::MatrixOperand;

/// Whether libxsmm can JIT kernels on this CPU (x86-64 with AVX2 or newer).
bool available();

/// c[m x n] = op(a)[m x k] op(b)[k x n] (+ c when beta == 1) (+ bias[n] on every row when bias is
/// not null; then beta must be 0). Row-major c with leading dimension ldc. Returns false, having
/// touched nothing, where it does not take the product: op(b) transposed together with op(a),
/// beta other than 0 or 1, a shape outside the small range it is fast for, or no kernel for this
/// CPU. Each element of c is the same bits at any thread count (the threads split c's columns;
/// no element's sum over k is split).
bool gemm(std::int64_t m, std::int64_t n, std::int64_t k, MatrixOperand a, MatrixOperand b,
          float beta, float* c, std::int64_t ldc, const float* bias);

}  // namespace hpctrain::core::libxsmm
