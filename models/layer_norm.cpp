// Layer normalisation. Forward, per row of D values: mean, biased variance by a second pass
// over the row (no cancellation as in E[x^2] - mean^2), rstd = 1 / sqrt(var + eps),
// y = (x - mean) rstd w + b. Backward with xhat = (x - mean) rstd and g = dy w:
//   dx = rstd (g - mean(g) - xhat mean(g xhat)),   dw += sum_rows dy xhat,   db += sum_rows dy.
// The row kernels run one row per thread (rows = N T is the wide extent), their row sums in 8
// fixed lanes (lane_sum: vectorisable, same bits at any thread count); the parameter
// gradients sum fixed chunks of 64 rows along contiguous rows, then the chunks per column
// (deterministic at any thread count, no atomics; see accumulate_scale_shift_gradients).
#include "hpctrain/base/error.hpp"
#include "hpctrain/core/elementwise.hpp"
#include "hpctrain/core/kokkos_compat.hpp"
#include "hpctrain/models/transformer_layers.hpp"

namespace hpctrain::models {

namespace {

using Range = Kokkos::RangePolicy<core::ExecSpace>;

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

template <class T>
void normalize_rows(const core::Vec<T>& x, std::int64_t rows, std::int64_t dim, T eps,
                    const core::Vec<T>& w, const core::Vec<T>& b, const core::Vec<T>& mean,
                    const core::Vec<T>& rstd, const core::Vec<T>& y) {
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
        const T s = T(1) / core::kmath::sqrt(v + eps);
        mean(r) = m;
        rstd(r) = s;
        for (std::int64_t d = 0; d < dim; ++d) y(base + d) = (x(base + d) - m) * s * w(d) + b(d);
      });
}

template <class T>
void normalize_rows_backward(const core::Vec<T>& x, const core::Vec<T>& dy, std::int64_t rows,
                             std::int64_t dim, const core::Vec<T>& w, const core::Vec<T>& mean,
                             const core::Vec<T>& rstd, const core::Vec<T>& dx) {
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

/// Rows per partial sum of the parameter gradients: a fixed count, not the thread count, so
/// the summation order (and the bits) depend on the number of rows only. 64 rows keep a
/// partial pair [2, dim] in L1 while a chunk streams through.
constexpr std::int64_t kRowsPerPartial = 64;

std::int64_t partial_count(std::int64_t rows) {
  return (rows + kRowsPerPartial - 1) / kRowsPerPartial;
}

/// dw += sum_rows dy xhat and db += sum_rows dy in two passes. (1) One thread per chunk of
/// kRowsPerPartial rows: for each row in order, add dy xhat and dy to the chunk's partial
/// [2, dim] -- the inner loop runs along a row, contiguous and vectorisable (each column's
/// sum still adds rows in order). (2) One thread per column: add the chunks' partials in chunk
/// order. Reads x and dy once (2 R D loads, 4 R D flops) instead of striding by D per row.
template <class T>
void accumulate_scale_shift_gradients(const core::Vec<T>& x, const core::Vec<T>& dy,
                                      std::int64_t rows, std::int64_t dim,
                                      const core::Vec<T>& mean, const core::Vec<T>& rstd,
                                      const core::Vec<T>& partial, const core::Vec<T>& dw,
                                      const core::Vec<T>& db) {
  const std::int64_t chunks = partial_count(rows);
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

}  // namespace

template <class T>
LayerNorm<T>::LayerNorm(std::int64_t dim, double eps) : dim_(dim), eps_(eps) {
  HPCTRAIN_REQUIRE(dim_ > 0 && eps_ >= 0.0, "layer_norm: dim must be positive and eps >= 0");
}

template <class T>
Shape LayerNorm<T>::output_shape(const Shape& s) const {
  HPCTRAIN_REQUIRE(!s.empty() && s.back() == dim_,
                   "layer_norm(" + std::to_string(dim_) + "): samples must end in an extent of " +
                       std::to_string(dim_) + ", got " + core::shape_string(s));
  return s;
}

template <class T>
std::vector<ParameterSpec> LayerNorm<T>::parameter_specs() const {
  return {{"weight", {dim_}, core::Init::ones, dim_, dim_},
          {"bias", {dim_}, core::Init::zeros, dim_, dim_}};
}

template <class T>
Tensor<T> LayerNorm<T>::forward(const Tensor<T>& x, bool /*train*/) {
  HPCTRAIN_REQUIRE(x.rank() >= 2 && x.dim(-1) == dim_,
                   "layer_norm: input shape " + core::shape_string(x.shape) + " does not end in " +
                       std::to_string(dim_));
  x_ = x;
  const std::int64_t rows = x.size() / dim_;
  core::ensure_shape(y_, "hpctrain::layer_norm::y", x.shape);
  if (static_cast<std::int64_t>(mean_.extent(0)) != rows) {
    mean_ = core::Vec<T>("hpctrain::layer_norm::mean", static_cast<std::size_t>(rows));
    rstd_ = core::Vec<T>("hpctrain::layer_norm::rstd", static_cast<std::size_t>(rows));
  }
  normalize_rows(x.data, rows, dim_, static_cast<T>(eps_), this->param(0).data,
                 this->param(1).data, mean_, rstd_, y_.data);
  return y_;
}

template <class T>
Tensor<T> LayerNorm<T>::backward(const Tensor<T>& dy, bool need_input_grad) {
  const std::int64_t rows = x_.size() / dim_;
  HPCTRAIN_REQUIRE(dy.size() == x_.size(), "layer_norm: output gradient shape " +
                                               core::shape_string(dy.shape) + " does not match");
  const auto partial_size = static_cast<std::size_t>(partial_count(rows) * 2 * dim_);
  if (partial_sums_.extent(0) != partial_size) {
    partial_sums_ = core::Vec<T>("hpctrain::layer_norm::partial_parameter_sums", partial_size);
  }
  accumulate_scale_shift_gradients(x_.data, dy.data, rows, dim_, mean_, rstd_, partial_sums_,
                                   this->grad(0).data, this->grad(1).data);
  if (!need_input_grad) return {};
  core::ensure_shape(dx_, "hpctrain::layer_norm::dx", x_.shape);
  normalize_rows_backward(x_.data, dy.data, rows, dim_, this->param(0).data, mean_, rstd_,
                          dx_.data);
  return dx_;
}

template class LayerNorm<float>;
template class LayerNorm<double>;

}  // namespace hpctrain::models
