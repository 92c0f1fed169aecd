#pragma once
// The dense products the ml fitters run through the BLAS (OpenBLAS's dgemm and dsyrk, Fortran
// ABI, column-major), written for row-major matrices. Internal to hpctrain::ml.
#include <cstddef>
#include <cstdint>

#include "hpctrain/core/environment.hpp"
#include "hpctrain/core/gemm.hpp"

extern "C" {
void dgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k, const double* alpha,
            const double* a, const int* lda, const double* b, const int* ldb, const double* beta, double* c,
            const int* ldc, std::size_t transa_len, std::size_t transb_len);
void dsyrk_(const char* uplo, const char* trans, const int* n, const int* k, const double* alpha, const double* a,
            const int* lda, const double* beta, double* c, const int* ldc, std::size_t uplo_len, std::size_t trans_len);
}

namespace hpctrain::ml::detail {

/// z (rows x k) = x (rows x d) times w^T, w being k x d; all row-major. Column-major view:
/// z^T (k x rows) = w_cm^T x_cm with w_cm = w^T (d x k) and x_cm = x^T (d x rows).
inline void rows_times_transpose(const double* x, std::int64_t rows, std::int64_t d, const double* w, std::int64_t k,
                                 double* z) {
  const int m = static_cast<int>(k), n = static_cast<int>(rows), kk = static_cast<int>(d);
  const double one = 1.0, zero = 0.0;
  dgemm_("T", "N", &m, &n, &kk, &one, w, &kk, x, &kk, &zero, z, &m, 1, 1);
}

/// acc (k x d) += g^T x for g (rows x k) and x (rows x d); all row-major. Column-major view:
/// acc_cm (d x k) += x_cm (d x rows) times g_cm^T, g_cm = g^T (k x rows).
inline void add_transpose_times_rows(const double* g, std::int64_t rows, std::int64_t k, const double* x,
                                     std::int64_t d, double* acc) {
  const int m = static_cast<int>(d), n = static_cast<int>(k), kk = static_cast<int>(rows);
  const double one = 1.0;
  dgemm_("N", "T", &m, &n, &kk, &one, x, &m, g, &n, &one, acc, &m, 1, 1);
}

/// q (k x k) = a^T a for a (rows x k), row-major; only q's lower triangle (c <= r) is written.
/// Column-major view: q_cm = a_cm a_cm^T (dsyrk, upper triangle), a_cm = a^T (k x rows).
inline void transpose_times_self(const double* a, std::int64_t rows, std::int64_t k, double* q) {
  const int n = static_cast<int>(k), kk = static_cast<int>(rows);
  const double one = 1.0, zero = 0.0;
  dsyrk_("U", "N", &n, &kk, &one, a, &n, &zero, q, &n, 1, 1);
}

/// The same two products in single precision (logreg --products f32), through the compute
/// core's gemm: oneDNN's matmul (AVX-512 brgemm kernels, one primitive per shape, cached) where
/// the build has oneDNN, else KokkosBlas -> OpenBLAS. At logreg's shapes (64 x 784 times
/// 784 x 10) oneDNN ran the fit's products in about half of OpenBLAS's time on this image, whose
/// OPENBLAS_CORETYPE=Haswell selects the AVX2 kernels (docs/ml.md). Deterministic for a fixed
/// shape and thread count (one thread during a fit: SingleBlasThread sets oneDNN's too).
inline void rows_times_transpose(const float* x, std::int64_t rows, std::int64_t d, const float* w, std::int64_t k,
                                 float* z) {
  using core::Matrix;
  core::gemm(core::Trans::no, core::Trans::yes, 1.0f, Matrix<float>(const_cast<float*>(x), rows, d), Matrix<float>(const_cast<float*>(w), k, d),
             0.0f, Matrix<float>(z, rows, k));
}
/// acc (k x d) = g^T x (beta 0: acc's old contents are ignored).
inline void transpose_times_rows(const float* g, std::int64_t rows, std::int64_t k, const float* x, std::int64_t d,
                                 float* acc) {
  using core::Matrix;
  core::gemm(core::Trans::yes, core::Trans::no, 1.0f, Matrix<float>(const_cast<float*>(g), rows, k), Matrix<float>(const_cast<float*>(x), rows, d),
             0.0f, Matrix<float>(acc, k, d));
}

/// Rows per pass inside a sum block: the products of a sub-block run while its rows (64 x d
/// doubles, 400 KB at d = 784) are still in the core's L2, so a pass streams the samples from
/// memory once. A fixed constant, so a block's result has the same bits at any rank count.
constexpr std::int64_t kSubBlockRows = 64;

/// One BLAS thread while it lives (the fits hold one): OpenBLAS's threaded dgemm may split a
/// product differently by thread count, and a block's term must have the same bits at any rank
/// count.
/// The ranks are the parallelism (one rank per core).
class SingleBlasThread {
 public:
  SingleBlasThread() : previous_(hpctrain::blas_threads()) { hpctrain::set_blas_threads(1); }
  ~SingleBlasThread() {
    if (previous_ > 1) hpctrain::set_blas_threads(previous_);
  }
  SingleBlasThread(const SingleBlasThread&) = delete;
  SingleBlasThread& operator=(const SingleBlasThread&) = delete;

 private:
  int previous_;
};

}  // namespace hpctrain::ml::detail
