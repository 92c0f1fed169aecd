// Row-wise softmax and its backward (core/softmax.hpp): one row per thread (on the rank's
// OpenMP team where Kokkos is Serial: detail::host_parallel_for), each row's reductions in index
// order, so the bits do not depend on the thread count.
#include "hpctrain/core/softmax.hpp"

#include "host_parallel.hpp"

namespace hpctrain::core {

/// Each row of the [rows, len] matrix in `s` becomes its softmax (stable: the row max is
/// subtracted before exp).
template <class T>
void softmax_rows(std::int64_t rows, std::int64_t len, const Vec<T>& s) {
  T* const data = s.data();
  detail::host_parallel_for(
      "hpctrain::attention::softmax", rows, KOKKOS_LAMBDA(const std::int64_t r) { softmax_row(data + r * len, len); },
      len);
}

/// dp <- p (dp - sum_j dp_j p_j) per row: the softmax backward, in place in dp.
template <class T>
void softmax_rows_backward(std::int64_t rows, std::int64_t len, const Vec<T>& p,
                           const Vec<T>& dp) {
  const T* const pd = p.data();
  T* const dpd = dp.data();
  detail::host_parallel_for(
      "hpctrain::attention::softmax_backward", rows,
      KOKKOS_LAMBDA(const std::int64_t r) { softmax_row_backward(pd + r * len, dpd + r * len, len); }, len);
}

#define HPCTRAIN_INSTANTIATE(T)                                                  \
  template void softmax_rows<T>(std::int64_t, std::int64_t, const Vec<T>&); \
  template void softmax_rows_backward<T>(std::int64_t, std::int64_t, const Vec<T>&, const Vec<T>&);

HPCTRAIN_INSTANTIATE(float)
HPCTRAIN_INSTANTIATE(double)

}  // namespace hpctrain::core
