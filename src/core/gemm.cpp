#include "hpctrain/core/gemm.hpp"

#include "hpctrain/collectives/error.hpp"

#include <KokkosBlas3_gemm.hpp>

#include <string>

namespace hpctrain::core {

namespace {

std::string dims(std::int64_t r, std::int64_t c) {
  return "[" + std::to_string(r) + ", " + std::to_string(c) + "]";
}

}  // namespace

template <class T>
void gemm(Trans trans_a, Trans trans_b, T alpha, const Matrix<T>& a, const Matrix<T>& b, T beta,
          const Matrix<T>& c) {
  const bool ta = trans_a == Trans::yes;
  const bool tb = trans_b == Trans::yes;
  const auto a_rows = static_cast<std::int64_t>(a.extent(ta ? 1 : 0));
  const auto a_cols = static_cast<std::int64_t>(a.extent(ta ? 0 : 1));
  const auto b_rows = static_cast<std::int64_t>(b.extent(tb ? 1 : 0));
  const auto b_cols = static_cast<std::int64_t>(b.extent(tb ? 0 : 1));
  HPCTRAIN_REQUIRE(a_cols == b_rows && static_cast<std::int64_t>(c.extent(0)) == a_rows &&
                       static_cast<std::int64_t>(c.extent(1)) == b_cols,
                   "gemm: op(A) " + dims(a_rows, a_cols) + " x op(B) " + dims(b_rows, b_cols) +
                       " does not give C " +
                       dims(static_cast<std::int64_t>(c.extent(0)),
                            static_cast<std::int64_t>(c.extent(1))));
  if (a_rows == 0 || b_cols == 0) return;
  if (a_cols == 0) {  // BLAS would leave C untouched; the product is beta * C
    if (beta == T(0)) {
      Kokkos::deep_copy(c, T(0));
    } else {
      const Matrix<T> cc = c;
      const T bb = beta;
      Kokkos::parallel_for(
          "hpctrain::gemm_scale_c",
          Kokkos::RangePolicy<ExecSpace>(0, static_cast<std::int64_t>(c.size())),
          KOKKOS_LAMBDA(const std::int64_t i) { cc.data()[i] *= bb; });
    }
    return;
  }
  KokkosBlas::gemm(ta ? "T" : "N", tb ? "T" : "N", alpha, a, b, beta, c);
}

template void gemm<float>(Trans, Trans, float, const Matrix<float>&, const Matrix<float>&, float,
                          const Matrix<float>&);
template void gemm<double>(Trans, Trans, double, const Matrix<double>&, const Matrix<double>&,
                           double, const Matrix<double>&);

}  // namespace hpctrain::core
