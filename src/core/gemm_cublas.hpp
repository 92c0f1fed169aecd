#pragma once
// Internal to hpctrain::core: cuBLAS behind core::gemm in builds configured with
// HPCTRAIN_GEMM_VENDOR=cublas (HPCTRAIN_ENABLE_CUDA=ON without Kokkos Kernels). gemm.cpp
// dispatches to it; every pointer is device memory of the Kokkos CUDA execution space.

#include <cstdint>

namespace hpctrain::core::cublas {

/// A row-major matrix operand on the device: op(X) of the product, X stored with leading
/// dimension `ld` (its row stride), transposed when `trans`.
template <class T>
struct MatrixOperand {
  const T* data;
  std::int64_t ld;
  bool trans;
};

/// c[m x n] = alpha op(a)[m x k] op(b)[k x n] + beta c, row-major c with leading dimension ldc
/// (beta = 0 ignores c's old contents). Enqueued on Kokkos::Cuda()'s stream, not waited for.
/// Throws on a dimension above INT_MAX (the 32-bit cuBLAS API) or a failed cuBLAS call.
void gemm(std::int64_t m, std::int64_t n, std::int64_t k, float alpha, MatrixOperand<float> a,
          MatrixOperand<float> b, float beta, float* c, std::int64_t ldc);
void gemm(std::int64_t m, std::int64_t n, std::int64_t k, double alpha, MatrixOperand<double> a,
          MatrixOperand<double> b, double beta, double* c, std::int64_t ldc);

}  // namespace hpctrain::core::cublas
