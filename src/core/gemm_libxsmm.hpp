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
///
/// leaf_rows > 0 (op(a) = a only; else false): c's and a's rows in leaves of leaf_rows rows (the
/// last may be shorter), each leaf computed with the kernels, scratch layout and order a call
/// with that leaf's rows alone uses, so with its bits; in one parallel region, b's rows copied
/// (where that is done) once. Where any leaf's product would not be taken, returns false having
/// touched nothing: then each leaf called alone gives the same result.
bool gemm(std::int64_t m, std::int64_t n, std::int64_t k, MatrixOperand a, MatrixOperand b,
          float beta, float* c, std::int64_t ldc, const float* bias, std::int64_t leaf_rows = 0);

/// c[m x n] = the pairwise leaf tree (core/leaf_tree.hpp) over a's and b's rows cut into leaves of
/// `leaf_rows` (the last may be shorter): leaf l's term is a_l^T b_l with the bits of the kernels
/// gemm() runs for that product alone (beta 0: those kernels, or on AVX-512 hpctrain's own that a
/// once-per-shape probe shows to agree), so the bits are those of separate products added over
/// the tree. a is [rows x m] (op(a) = a^T), b [rows x n], both row-major. Each thread's
/// column block is summed in scratch blocks beside c's (cache-resident), not in whole matrices.
/// Returns false, having touched nothing, where gemm() would not take a leaf's product.
bool gemm_tn_leaf_tree(std::int64_t m, std::int64_t n, std::int64_t rows, std::int64_t leaf_rows, MatrixOperand a,
                       MatrixOperand b, float* c, std::int64_t ldc);

}  // namespace hpctrain::core::libxsmm
