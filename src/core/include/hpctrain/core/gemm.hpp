#pragma once
/// @file
/// Matrix multiply. Two implementations sit behind gemm(), as Kokkos Kernels puts a vendor
/// library (TPL) behind its portable call:
/// - **onednn** (float, host memory, when built with HPCTRAIN_ENABLE_ONEDNN): oneDNN's matmul
///   primitive (brgemm kernels), created once per shape and cached; fastest at the small and
///   thin shapes of dense layers at training batch sizes.
/// - **blas**: KokkosBlas::gemm (OpenBLAS on the host, cuBLAS on a CUDA build); every type and
///   memory space.
/// gemm_backend() picks (HPCTRAIN_GEMM_BACKEND=onednn|blas; default: onednn when built). Both are
/// deterministic for a fixed shape and thread count; they differ from each other in the last
/// bits. double always takes the blas path.

#include "hpctrain/core/tensor.hpp"

namespace hpctrain::core {

enum class Trans { no, yes };

/// C = alpha * op(A) * op(B) + beta * C on row-major matrices, op(X) = X or X^T.
/// Throws on mismatched shapes. beta = 0 ignores C's old contents (NaNs included).
template <class T>
void gemm(Trans trans_a, Trans trans_b, T alpha, const Matrix<T>& a, const Matrix<T>& b, T beta,
          const Matrix<T>& c);

/// The dense layer's forward: y[n, out] = x[n, in] w[out, in]^T + bias[out] on every row.
/// One fused pass on the onednn backend; gemm then add_row_bias on the blas one.
template <class T>
void linear_forward(const Matrix<T>& x, const Matrix<T>& w, const Vec<T>& bias,
                    const Matrix<T>& y);

enum class GemmBackend { blas, onednn };

/// The backend gemm() uses for float (HPCTRAIN_GEMM_BACKEND, read once; throws on an unknown
/// value or on onednn in a build without it).
GemmBackend gemm_backend();
/// Overrides gemm_backend() for the rest of the process (tests run both paths). Throws when
/// asked for onednn in a build without it.
void set_gemm_backend(GemmBackend backend);
/// "blas" or "onednn".
const char* gemm_backend_name(GemmBackend backend);

}  // namespace hpctrain::core
