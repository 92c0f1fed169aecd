// Strided batched matrix product (core::batched_gemm): the attention's Q K^T, P V and their
// gradients, read and written in place inside the row-major qkv / context buffers.
//
// Dispatch: float on host memory with the onednn backend -> one oneDNN matmul over a 4-D
// [outer, inner, rows, cols] strided problem (gemm_onednn.cpp); everything else -> the
// portable kernel below.
//
// Portable kernel: one thread per output row (o, i, r) of the outer * inner * m rows; for
// each of the n columns a k-term dot product in index order, then alpha * dot (+ beta * c).
// Cost 2 outer inner m n k flops, no blocking: it reads B with stride row_stride per term, so
// it is the reference (double, CUDA builds, HPCTRAIN_GEMM_BACKEND=blas), not the fast path.
// Fixed summation order: results are the same at any thread count and batch size.
#include "hpctrain/base/error.hpp"
#include "hpctrain/core/conv.hpp"
#include "hpctrain/core/gemm.hpp"

#include <string>
#include <type_traits>

#ifdef HPCTRAIN_HAVE_ONEDNN
#include "gemm_onednn.hpp"
#endif

namespace hpctrain::core {

namespace {

/// Throws unless every element of the [outer, inner, rows, cols] operand lies in its buffer.
template <class T>
void require_inside(const char* name, const BatchedGemmShape& s, std::int64_t rows,
                    std::int64_t cols, const StridedMatrices<T>& x) {
  HPCTRAIN_REQUIRE(x.offset >= 0 && x.outer_stride >= 0 && x.inner_stride >= 0 &&
                       x.row_stride >= 0 && x.col_stride >= 0,
                   std::string("batched_gemm: ") + name + " has a negative offset or stride");
  const std::int64_t last = x.offset + (s.outer - 1) * x.outer_stride +
                            (s.inner - 1) * x.inner_stride + (rows - 1) * x.row_stride +
                            (cols - 1) * x.col_stride;
  HPCTRAIN_REQUIRE(last < static_cast<std::int64_t>(x.data.extent(0)),
                   std::string("batched_gemm: ") + name + " reaches element " +
                       std::to_string(last) + " of a buffer of " +
                       std::to_string(x.data.extent(0)));
}

template <class T>
void batched_gemm_portable(const BatchedGemmShape& s, T alpha, const StridedMatrices<T>& a,
                           const StridedMatrices<T>& b, T beta, const StridedMatrices<T>& c) {
  const StridedMatrices<T> aa = a, bb = b, cc = c;  // locals: the lambda copies them
  const std::int64_t inner = s.inner, m = s.m, n = s.n, k = s.k;
  Kokkos::parallel_for(
      "hpctrain::batched_gemm", Kokkos::RangePolicy<ExecSpace>(0, s.outer * s.inner * s.m),
      KOKKOS_LAMBDA(const std::int64_t row) {
        const std::int64_t r = row % m, batch = row / m;
        const std::int64_t o = batch / inner, i = batch % inner;
        const std::int64_t a0 = aa.offset + o * aa.outer_stride + i * aa.inner_stride +
                                r * aa.row_stride;
        const std::int64_t b0 = bb.offset + o * bb.outer_stride + i * bb.inner_stride;
        const std::int64_t c0 = cc.offset + o * cc.outer_stride + i * cc.inner_stride +
                                r * cc.row_stride;
        for (std::int64_t j = 0; j < n; ++j) {
          T dot = 0;
          for (std::int64_t p = 0; p < k; ++p) {
            dot += aa.data(a0 + p * aa.col_stride) *
                   bb.data(b0 + p * bb.row_stride + j * bb.col_stride);
          }
          T& out = cc.data(c0 + j * cc.col_stride);
          out = beta == T(0) ? alpha * dot : alpha * dot + beta * out;
        }
      });
}

}  // namespace

template <class T>
void require_batched_gemm_operands(const BatchedGemmShape& s, const StridedMatrices<T>& a,
                                   const StridedMatrices<T>& b, const StridedMatrices<T>& c) {
  HPCTRAIN_REQUIRE(s.outer >= 0 && s.inner >= 0 && s.m >= 0 && s.n >= 0 && s.k >= 0,
                   "batched_gemm: negative extent");
  if (s.outer == 0 || s.inner == 0 || s.m == 0 || s.n == 0) return;
  require_inside("C", s, s.m, s.n, c);
  if (s.k > 0) {
    require_inside("A", s, s.m, s.k, a);
    require_inside("B", s, s.k, s.n, b);
  }
}

template <class T>
void batched_gemm(const BatchedGemmShape& s, T alpha, const StridedMatrices<T>& a,
                  const StridedMatrices<T>& b, T beta, const StridedMatrices<T>& c) {
  require_batched_gemm_operands(s, a, b, c);
  if (s.outer == 0 || s.inner == 0 || s.m == 0 || s.n == 0) return;
#ifdef HPCTRAIN_HAVE_ONEDNN
  if constexpr (std::is_same_v<T, float> &&
                Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible) {
    if (s.k > 0 && float_products_on_onednn()) {
      ExecSpace().fence();
      const auto desc = [](const StridedMatrices<float>& x) {
        return onednn::StridedOperand{x.data.data() + x.offset,
                                      {x.outer_stride, x.inner_stride, x.row_stride,
                                       x.col_stride}};
      };
      onednn::batched_gemm({s.outer, s.inner, s.m, s.n, s.k}, alpha, desc(a), desc(b), beta,
                           desc(c));
      return;
    }
  }
#endif
  batched_gemm_portable(s, alpha, a, b, beta, c);
}

template void require_batched_gemm_operands<float>(const BatchedGemmShape&, const StridedMatrices<float>&,
                                                  const StridedMatrices<float>&, const StridedMatrices<float>&);
template void require_batched_gemm_operands<double>(const BatchedGemmShape&, const StridedMatrices<double>&,
                                                   const StridedMatrices<double>&, const StridedMatrices<double>&);
template void batched_gemm<float>(const BatchedGemmShape&, float, const StridedMatrices<float>&,
                                  const StridedMatrices<float>&, float,
                                  const StridedMatrices<float>&);
template void batched_gemm<double>(const BatchedGemmShape&, double,
                                   const StridedMatrices<double>&,
                                   const StridedMatrices<double>&, double,
                                   const StridedMatrices<double>&);

}  // namespace hpctrain::core
