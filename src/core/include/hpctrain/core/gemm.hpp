#pragma once
/// @file
/// Matrix multiply. Vendor libraries sit behind gemm(), as Kokkos Kernels puts a vendor library
/// (TPL) behind its portable call:
/// - **libxsmm** (float, host memory, when built with HPCTRAIN_ENABLE_LIBXSMM and the CPU has
///   AVX2 or newer): libxsmm's JIT kernels for the small products of dense layers (at most 256
///   rows of a batch), the rest through onednn (or blas without it). On the MLP's products, one
///   Zen 4 core: 1.0-1.45x oneDNN's GFLOP/s at 16-row micro-shards (deterministic mode), 0.98-1.1x
///   at 128 rows (bench_kernels' gemm rows; docs/compute-core.md).
///   Each element's bits do not depend on the rank's thread count.
/// - **onednn** (float, host memory, when built with HPCTRAIN_ENABLE_ONEDNN): oneDNN's matmul
///   primitive (brgemm kernels), created once per shape and cached; fastest at the small and
///   thin shapes of dense layers at training batch sizes.
/// - **blas**: the vendor BLAS chosen at configure time (HPCTRAIN_GEMM_VENDOR):
///   `kokkos-kernels` (host builds' default): KokkosBlas::gemm, OpenBLAS on the host (or Kokkos
///   Kernels' cuBLAS TPL in a CUDA build that asks for it); `cublas` (CUDA builds' default):
///   cublasSgemm/cublasDgemm called directly on the Kokkos CUDA stream, no Kokkos Kernels or host
///   BLAS needed. Every type; gemm_backend_name() calls it "cublas" in the latter builds.
/// gemm_backend() picks (HPCTRAIN_GEMM_BACKEND=libxsmm|onednn|blas, also cublas in a cublas
/// build; default: the first of libxsmm, onednn that this build and CPU have, else blas). oneDNN is host-only: CUDA builds never have it. The backends are
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

/// c[m, n] = the sum over a's and b's rows ([rows, m] and [rows, n]) cut into leaves of
/// `leaf_rows` rows (the last may be shorter), added over the pairwise leaf tree of
/// core/leaf_tree.hpp; leaf l's term is gemm(Trans::yes, Trans::no, 1, a_l, b_l, 0, .) of its rows
/// alone. So c has the bits of the separate products summed over coll::TreeSum's tree, whatever
/// `rows` is: a dense layer's weight gradient over a node of deterministic training's
/// micro-shards. On the libxsmm backend the tree is summed block by block in cache-resident scratch
/// beside c (no whole-matrix term is written); elsewhere each term is a whole product in memory
/// allocated by the call. rows = 0 gives c = 0.
template <class T>
void gemm_tn_leaf_tree(std::int64_t leaf_rows, const Matrix<T>& a, const Matrix<T>& b, const Matrix<T>& c);

/// The dense layer's forward: y[n, out] = x[n, in] w[out, in]^T + bias[out] on every row.
/// One fused pass on the onednn backend; gemm then add_row_bias on the blas one.
template <class T>
void linear_forward(const Matrix<T>& x, const Matrix<T>& w, const Vec<T>& bias,
                    const Matrix<T>& y);

/// gemm(Trans::no, trans_b, ...) with a's and c's rows cut into leaves of `leaf_rows` rows (the
/// last may be shorter): every leaf's rows of c are what gemm() gives for that leaf's rows of a
/// alone, bit for bit, however many leaves the call has. Deterministic training's grouped passes
/// run a dense layer's products this way over a node of micro-shards (the input gradient
/// dx = dy w); on the libxsmm backend all leaves share one parallel region, elsewhere it is one
/// gemm() per leaf.
template <class T>
void gemm_in_leaves(std::int64_t leaf_rows, Trans trans_b, T alpha, const Matrix<T>& a, const Matrix<T>& b, T beta,
                    const Matrix<T>& c);

/// linear_forward() with x's and y's rows in leaves of `leaf_rows` rows, each leaf's rows of y
/// the bits linear_forward() gives that leaf alone (as gemm_in_leaves).
template <class T>
void linear_forward_in_leaves(std::int64_t leaf_rows, const Matrix<T>& x, const Matrix<T>& w, const Vec<T>& bias,
                              const Matrix<T>& y);

/// One operand of batched_gemm(): a [outer, inner] grid of [rows, cols] matrices inside a 1-D
/// buffer, element (o, i, r, c) at `data(offset + o * outer_stride + i * inner_stride +
/// r * row_stride + c * col_stride)` (strides in elements, any non-negative values). Row and
/// column counts come from BatchedGemmShape; a transposed operand is the same matrices with
/// row_stride and col_stride swapped (transposed()).
///
/// For multi-head attention on qkv [N T, 3D] (H heads of dh columns) the query of sample n,
/// head h is {qkv, 0, T 3D, dh, 3D, 1} as a [T, dh] matrix, the key {qkv, D, ...} and, as the
/// [dh, T] matrix k^T, {qkv, D, T 3D, dh, 1, 3D}: nothing is copied.
template <class T>
struct StridedMatrices {
  Vec<T> data;
  std::int64_t offset = 0;
  std::int64_t outer_stride = 0, inner_stride = 0, row_stride = 0, col_stride = 1;

  /// The same storage seen as the transposed matrices.
  StridedMatrices transposed() const {
    return {data, offset, outer_stride, inner_stride, col_stride, row_stride};
  }
};

/// Extents of batched_gemm(): outer x inner products of [m, k] x [k, n] -> [m, n].
struct BatchedGemmShape {
  std::int64_t outer, inner, m, n, k;
};

/// C[o, i] = alpha A[o, i] B[o, i] + beta C[o, i] for every o < outer, i < inner, with A of
/// [m, k], B of [k, n] and C of [m, n] matrices laid out as StridedMatrices (transposes are
/// strides). beta = 0 ignores C's old contents (NaNs included); C's matrices must not overlap
/// each other or A and B. Throws when an operand reaches past its buffer's end or a count is
/// negative.
///
/// Backends as gemm(): float on host memory goes to one oneDNN batched matmul primitive (4-D
/// strided memory descriptors; alpha an output scale, beta the sum post-op; created once per
/// shape, strides, alpha and beta and cached); otherwise (double, HPCTRAIN_GEMM_BACKEND=blas,
/// builds without oneDNN) a portable Kokkos kernel, one thread per output row, each element a
/// k-term dot product summed in order: 2 outer inner m n k flops either way. Both are
/// deterministic for fixed shapes, strides and thread count, and each product's result does
/// not depend on outer (a sample's attention is the same at any batch size).
template <class T>
void batched_gemm(const BatchedGemmShape& shape, T alpha, const StridedMatrices<T>& a,
                  const StridedMatrices<T>& b, T beta, const StridedMatrices<T>& c);

/// batched_gemm()'s checks of its operands, without the product: throws when a count is
/// negative or an operand reaches past its buffer's end (callers that hand the same operands to
/// oneDNN on raw pointers check them here first).
template <class T>
void require_batched_gemm_operands(const BatchedGemmShape& shape, const StridedMatrices<T>& a,
                                   const StridedMatrices<T>& b, const StridedMatrices<T>& c);

enum class GemmBackend { blas, onednn, libxsmm };

/// Whether this build has libxsmm and it can generate kernels for this CPU.
bool libxsmm_available();

/// The backend gemm() uses for float (HPCTRAIN_GEMM_BACKEND, read once; throws on an unknown
/// value or on onednn in a build without it).
GemmBackend gemm_backend();
/// Whether float products on host memory (alpha 1 for gemm) go to oneDNN: the gemm backend is
/// onednn, or libxsmm for what libxsmm declines, and the build has oneDNN. The one test behind
/// gemm()'s, batched_gemm()'s and the attention's choice of oneDNN.
bool float_products_on_onednn();
/// Overrides gemm_backend() for the rest of the process (tests run every path). Throws when
/// asked for onednn or libxsmm in a build (or, for libxsmm, a CPU) without it.
void set_gemm_backend(GemmBackend backend);
/// "libxsmm", "onednn", or for GemmBackend::blas what runs: "cublas" in HPCTRAIN_GEMM_VENDOR=cublas
/// builds, else "blas".
const char* gemm_backend_name(GemmBackend backend);

}  // namespace hpctrain::core
