// Layer normalisation kernels (core/layer_norm.hpp).
//
// Forward, per row of D values: mean, biased variance by a second pass
// over the row (no cancellation as in E[x^2] - mean^2), rstd = 1 / sqrt(var + eps),
// y = (x - mean) rstd w + b. Backward with xhat = (x - mean) rstd and g = dy w:
//   dx = rstd (g - mean(g) - xhat mean(g xhat)),   dw += sum_rows dy xhat,   db += sum_rows dy.
// The row kernels run one row per thread (rows = N T is the wide extent), their row sums in 8
// fixed lanes (lane_sum: vectorisable, same bits at any thread count); the parameter
// gradients sum fixed chunks of 64 rows along contiguous rows, then the chunks per column
// (deterministic at any thread count, no atomics; see accumulate_scale_shift_gradients).

#include "hpctrain/core/layer_norm.hpp"

#include "hpctrain/core/kokkos_compat.hpp"

namespace hpctrain::core {

namespace {

using Range = Kokkos::RangePolicy<ExecSpace>;

/// Partial sums of a row reduction: element d goes to lane d % kLanes and the lanes are added
/// in lane order at the end. A fixed split (not the machine's vector width), so GCC vectorises
/// the loop at -O3 without reassociating and the bits are the same on every machine and at
/// every thread count. 8 lanes: two SSE vectors of float, one AVX-512 vector of double.
constexpr int kLanes = 8;

/// sum over d < n of f(d), in kLanes lanes.
template <class T, class F>
KOKKOS_INLINE_FUNCTION T lane_sum(std::int64_t n, const F& f) {
  T lane[kLanes] = {};
  std::int64_t d = 0;
  for (; d + kLanes <= n; d += kLanes) {
    for (int j = 0; j < kLanes; ++j) lane[j] += f(d + j);
  }
  for (int j = 0; d + j < n; ++j) lane[j] += f(d + j);
  T sum = 0;
  for (int j = 0; j < kLanes; ++j) sum += lane[j];
  return sum;
}

/// Rows per partial sum of the parameter gradients: a fixed count, not the thread count, so
/// the summation order (and the bits) depend on the number of rows only. 64 rows keep a
/// partial pair [2, dim] in L1 while a chunk streams through.
constexpr std::int64_t kRowsPerPartial = 64;

}  // namespace

template <class T>
void layer_norm_forward(const Vec<T>& x, std::int64_t rows, std::int64_t dim, T eps,
                    const Vec<T>& w, const Vec<T>& b, const Vec<T>& mean,
                    const Vec<T>& rstd, const Vec<T>& y) {
  Kokkos::parallel_for(
      "hpctrain::layer_norm::forward", Range(0, rows), KOKKOS_LAMBDA(const std::int64_t r) {
        const std::int64_t base = r * dim;
        const T m = lane_sum<T>(dim, [&](std::int64_t d) { return x(base + d); }) /
                    static_cast<T>(dim);
        const T v = lane_sum<T>(dim, [&](std::int64_t d) {
                      const T c = x(base + d) - m;
                      return c * c;
                    }) /
                    static_cast<T>(dim);
        const T s = T(1) / kmath::sqrt(v + eps);
        mean(r) = m;
        rstd(r) = s;
        for (std::int64_t d = 0; d < dim; ++d) y(base + d) = (x(base + d) - m) * s * w(d) + b(d);
      });
}

template <class T>
void layer_norm_backward_input(const Vec<T>& x, const Vec<T>& dy, std::int64_t rows,
                             std::int64_t dim, const Vec<T>& w, const Vec<T>& mean,
                             const Vec<T>& rstd, const Vec<T>& dx) {
  Kokkos::parallel_for(
      "hpctrain::layer_norm::backward_input", Range(0, rows), KOKKOS_LAMBDA(const std::int64_t r) {
        const std::int64_t base = r * dim;
        const T m = mean(r), s = rstd(r);
        const T g_mean = lane_sum<T>(dim, [&](std::int64_t d) { return dy(base + d) * w(d); }) /
                         static_cast<T>(dim);
        const T gx_mean = lane_sum<T>(dim, [&](std::int64_t d) {
                            return dy(base + d) * w(d) * (x(base + d) - m) * s;
                          }) /
                          static_cast<T>(dim);
        for (std::int64_t d = 0; d < dim; ++d) {
          const T xhat = (x(base + d) - m) * s;
          dx(base + d) = s * (dy(base + d) * w(d) - g_mean - xhat * gx_mean);
        }
      });
}

std::int64_t layer_norm_partial_rows(std::int64_t rows) {
  return (rows + kRowsPerPartial - 1) / kRowsPerPartial;
}

/// dw += sum_rows dy xhat and db += sum_rows dy in two passes. (1) One thread per chunk of
/// kRowsPerPartial rows: for each row in order, add dy xhat and dy to the chunk's partial
/// [2, dim] -- the inner loop runs along a row, contiguous and vectorisable (each column's
/// sum still adds rows in order). (2) One thread per column: add the chunks' partials in chunk
/// order. Reads x and dy once (2 R D loads, 4 R D flops) instead of striding by D per row.
template <class T>
void layer_norm_parameter_gradients(const Vec<T>& x, const Vec<T>& dy,
                                      std::int64_t rows, std::int64_t dim,
                                      const Vec<T>& mean, const Vec<T>& rstd,
                                      const Vec<T>& partial, const Vec<T>& dw,
                                      const Vec<T>& db) {
  const std::int64_t chunks = layer_norm_partial_rows(rows);
  Kokkos::parallel_for(
      "hpctrain::layer_norm::backward_parameters_partial", Range(0, chunks),
      KOKKOS_LAMBDA(const std::int64_t c) {
        const std::int64_t pw = c * 2 * dim, pb = pw + dim;
        const std::int64_t r_end = (c + 1) * kRowsPerPartial < rows ? (c + 1) * kRowsPerPartial
                                                                     : rows;
        for (std::int64_t d = 0; d < 2 * dim; ++d) partial(pw + d) = 0;
        for (std::int64_t r = c * kRowsPerPartial; r < r_end; ++r) {
          const T m = mean(r), s = rstd(r);
          const std::int64_t base = r * dim;
          for (std::int64_t d = 0; d < dim; ++d) {
            const T g = dy(base + d);
            partial(pw + d) += g * ((x(base + d) - m) * s);
            partial(pb + d) += g;
          }
        }
      });
  Kokkos::parallel_for(
      "hpctrain::layer_norm::backward_parameters", Range(0, dim),
      KOKKOS_LAMBDA(const std::int64_t d) {
        T sw = 0, sb = 0;
        for (std::int64_t c = 0; c < chunks; ++c) {
          sw += partial(c * 2 * dim + d);
          sb += partial(c * 2 * dim + dim + d);
        }
        dw(d) += sw;
        db(d) += sb;
      });
}


#define HPCTRAIN_INSTANTIATE(T)                                                                              \
  template void layer_norm_forward<T>(const Vec<T>&, std::int64_t, std::int64_t, T, const Vec<T>&, const Vec<T>&, \
                                      const Vec<T>&, const Vec<T>&, const Vec<T>&);                          \
  template void layer_norm_backward_input<T>(const Vec<T>&, const Vec<T>&, std::int64_t, std::int64_t,       \
                                             const Vec<T>&, const Vec<T>&, const Vec<T>&, const Vec<T>&);    \
  template void layer_norm_parameter_gradients<T>(const Vec<T>&, const Vec<T>&, std::int64_t, std::int64_t,  \
                                                  const Vec<T>&, const Vec<T>&, const Vec<T>&, const Vec<T>&, \
                                                  const Vec<T>&);

HPCTRAIN_INSTANTIATE(float)
HPCTRAIN_INSTANTIATE(double)

}  // namespace hpctrain::core
