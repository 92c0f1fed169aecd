// Row-wise softmax and its backward (core/softmax.hpp): one row per thread, each row's
// reductions in index order, so the bits do not depend on the thread count.
#include "hpctrain/core/softmax.hpp"

#include "hpctrain/core/kokkos_compat.hpp"

namespace hpctrain::core {

namespace {
using Range = Kokkos::RangePolicy<ExecSpace>;
}  // namespace

/// Each row of the [rows, len] matrix in `s` becomes its softmax (stable: the row max is
/// subtracted before exp).
template <class T>
void softmax_rows(std::int64_t rows, std::int64_t len, const Vec<T>& s) {
  Kokkos::parallel_for(
      "hpctrain::attention::softmax", Range(0, rows), KOKKOS_LAMBDA(const std::int64_t r) {
        const std::int64_t base = r * len;
        T m = s(base);
        for (std::int64_t j = 1; j < len; ++j) m = s(base + j) > m ? s(base + j) : m;
        T sum = 0;
        for (std::int64_t j = 0; j < len; ++j) {
          const T e = kmath::exp(s(base + j) - m);
          s(base + j) = e;
          sum += e;
        }
        const T inv = T(1) / sum;
        for (std::int64_t j = 0; j < len; ++j) s(base + j) *= inv;
      });
}

/// dp <- p (dp - sum_j dp_j p_j) per row: the softmax backward, in place in dp.
template <class T>
void softmax_rows_backward(std::int64_t rows, std::int64_t len, const Vec<T>& p,
                           const Vec<T>& dp) {
  Kokkos::parallel_for(
      "hpctrain::attention::softmax_backward", Range(0, rows),
      KOKKOS_LAMBDA(const std::int64_t r) {
        const std::int64_t base = r * len;
        T dot = 0;
        for (std::int64_t j = 0; j < len; ++j) dot += dp(base + j) * p(base + j);
        for (std::int64_t j = 0; j < len; ++j) dp(base + j) = p(base + j) * (dp(base + j) - dot);
      });
}

#define HPCTRAIN_INSTANTIATE(T)                                                  \
  template void softmax_rows<T>(std::int64_t, std::int64_t, const Vec<T>&); \
  template void softmax_rows_backward<T>(std::int64_t, std::int64_t, const Vec<T>&, const Vec<T>&);

HPCTRAIN_INSTANTIATE(float)
HPCTRAIN_INSTANTIATE(double)

}  // namespace hpctrain::core
