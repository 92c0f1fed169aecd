// cuBLAS behind core::gemm (HPCTRAIN_GEMM_VENDOR=cublas): what KokkosBlas::gemm's cuBLAS TPL
// specialisation does, without Kokkos Kernels.
//
// Layout: cuBLAS is column-major, our matrices row-major. A row-major [r, c] matrix with
// leading dimension ld, read column-major, is its transpose [c, r] with the same ld. So
// C = op(A) op(B) is computed as C^T = op(B)^T op(A)^T: cuBLAS gets B first and A second, m and
// n swapped, each operand's own transpose flag; nothing is copied. ld >= 1 and >= the stored
// row length, as cuBLAS requires.
//
// Stream and handle: one cublasHandle_t per process, created on the first gemm and destroyed by
// a Kokkos finalize hook (while the CUDA context Kokkos holds is still up). Each call binds it
// to Kokkos::Cuda()'s stream, so the product is ordered after the kernels that wrote A and B and
// before those that read C, with no fence.
#include "gemm_cublas.hpp"

#include "hpctrain/base/error.hpp"
#include "hpctrain/base/unique_handle.hpp"

#include <Kokkos_Core.hpp>
#include <cublas_v2.h>

#include <climits>
#include <string>

namespace hpctrain::core::cublas {

namespace {

void require_success(cublasStatus_t status, const char* call) {
  HPCTRAIN_REQUIRE(status == CUBLAS_STATUS_SUCCESS,
                   std::string("cuBLAS: ") + call + " failed: " + cublasGetStatusName(status) + " (" +
                       cublasGetStatusString(status) + ")");
}

/// The handle may be destroyed only while Kokkos (and so its CUDA context) is up.
struct CublasHandleTraits {
  using handle_type = cublasHandle_t;
  static handle_type null() noexcept { return nullptr; }
  static bool is_null(handle_type h) noexcept { return h == nullptr; }
  static bool library_up() noexcept { return Kokkos::is_initialized(); }
  static void free(handle_type h) noexcept { (void)cublasDestroy(h); }
};
using CublasHandle = UniqueHandle<CublasHandleTraits>;

/// The process's handle, bound to the Kokkos CUDA stream.
cublasHandle_t handle_on_kokkos_stream() {
  static CublasHandle handle = [] {
    cublasHandle_t h = nullptr;
    require_success(cublasCreate(&h), "cublasCreate");
    CublasHandle owned(h);
    // A static's own name is in scope in its initialiser; the hook runs long after.
    Kokkos::push_finalize_hook([] { handle.reset(); });
    return owned;
  }();
  HPCTRAIN_REQUIRE(handle, "cuBLAS gemm after Kokkos::finalize");
  require_success(cublasSetStream(handle.get(), Kokkos::Cuda().cuda_stream()), "cublasSetStream");
  return handle.get();
}

int as_int(std::int64_t v, const char* what) {
  HPCTRAIN_REQUIRE(v <= INT_MAX, std::string("cuBLAS gemm: ") + what + " = " + std::to_string(v) +
                                     " exceeds the 32-bit cuBLAS API (INT_MAX)");
  return static_cast<int>(v);
}

cublasOperation_t op(bool trans) { return trans ? CUBLAS_OP_T : CUBLAS_OP_N; }

template <class T, class Gemm>
void column_major_gemm(Gemm vendor_gemm, const char* call, std::int64_t m, std::int64_t n, std::int64_t k,
                       T alpha, MatrixOperand<T> a, MatrixOperand<T> b, T beta, T* c, std::int64_t ldc) {
  cublasHandle_t h = handle_on_kokkos_stream();
  require_success(vendor_gemm(h, op(b.trans), op(a.trans), as_int(n, "n"), as_int(m, "m"), as_int(k, "k"), &alpha,
                              b.data, as_int(b.ld, "ldb"), a.data, as_int(a.ld, "lda"), &beta, c, as_int(ldc, "ldc")),
                  call);
}

}  // namespace

void gemm(std::int64_t m, std::int64_t n, std::int64_t k, float alpha, MatrixOperand<float> a,
          MatrixOperand<float> b, float beta, float* c, std::int64_t ldc) {
  column_major_gemm(cublasSgemm, "cublasSgemm", m, n, k, alpha, a, b, beta, c, ldc);
}

void gemm(std::int64_t m, std::int64_t n, std::int64_t k, double alpha, MatrixOperand<double> a,
          MatrixOperand<double> b, double beta, double* c, std::int64_t ldc) {
  column_major_gemm(cublasDgemm, "cublasDgemm", m, n, k, alpha, a, b, beta, c, ldc);
}

}  // namespace hpctrain::core::cublas
