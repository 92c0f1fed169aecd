#pragma once
/// @file
/// Matrix multiply through KokkosBlas::gemm (OpenBLAS on the host, cuBLAS on a CUDA build).

#include "hpctrain/core/tensor.hpp"

namespace hpctrain::core {

enum class Trans { no, yes };

/// C = alpha * op(A) * op(B) + beta * C on row-major matrices, op(X) = X or X^T.
/// Throws on mismatched shapes. beta = 0 ignores C's old contents (NaNs included).
template <class T>
void gemm(Trans trans_a, Trans trans_b, T alpha, const Matrix<T>& a, const Matrix<T>& b, T beta,
          const Matrix<T>& c);

}  // namespace hpctrain::core
