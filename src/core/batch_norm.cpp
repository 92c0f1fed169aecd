#include "hpctrain/core/batch_norm.hpp"

#include "hpctrain/base/error.hpp"

namespace hpctrain::core {

namespace {

using Range = Kokkos::RangePolicy<ExecSpace>;
using Doubles = Kokkos::View<double*, MemSpace>;

void require_size(std::int64_t have, std::int64_t want, const char* what) {
  HPCTRAIN_REQUIRE(have == want, std::string(what) + ": " + std::to_string(have) +
                                     " elements where " + std::to_string(want) + " are needed");
}

}  // namespace

// One work item per channel: the channel's N * H * W elements are summed in a fixed order
// (batch, then position), so the sums do not depend on the thread count.
template <class T>
void channel_moments(const ChannelGeometry& g, const Vec<T>& x, const Vec<T>& shift, const Doubles& sums) {
  require_size(static_cast<std::int64_t>(x.extent(0)), g.size(), "channel_moments x");
  require_size(static_cast<std::int64_t>(sums.extent(0)), 2 * g.channels, "channel_moments sums");
  const std::int64_t batch = g.batch, channels = g.channels, spatial = g.spatial;
  Kokkos::parallel_for(
      "hpctrain::channel_moments", Range(0, channels), KOKKOS_LAMBDA(const std::int64_t c) {
        const double s = static_cast<double>(shift(c));
        double s1 = 0.0, s2 = 0.0;
        for (std::int64_t n = 0; n < batch; ++n) {
          const std::int64_t base = (n * channels + c) * spatial;
          for (std::int64_t i = 0; i < spatial; ++i) {
            const double d = static_cast<double>(x(base + i)) - s;
            s1 += d;
            s2 += d * d;
          }
        }
        sums(c) = s1;
        sums(channels + c) = s2;
      });
}

template <class T>
void batch_norm_forward(const ChannelGeometry& g, const Vec<T>& x, const Doubles& mean, const Doubles& rstd,
                        const Vec<T>& gamma, const Vec<T>& beta, const Vec<T>& xhat, const Vec<T>& y) {
  require_size(static_cast<std::int64_t>(x.extent(0)), g.size(), "batch_norm_forward x");
  require_size(static_cast<std::int64_t>(y.extent(0)), g.size(), "batch_norm_forward y");
  require_size(static_cast<std::int64_t>(xhat.extent(0)), g.size(), "batch_norm_forward xhat");
  const std::int64_t channels = g.channels, spatial = g.spatial;
  Kokkos::parallel_for(
      "hpctrain::batch_norm_forward", Range(0, g.batch * channels), KOKKOS_LAMBDA(const std::int64_t row) {
        const std::int64_t c = row % channels;
        const T m = static_cast<T>(mean(c)), r = static_cast<T>(rstd(c));
        const T scale = gamma(c), shift = beta(c);
        const std::int64_t base = row * spatial;
        for (std::int64_t i = 0; i < spatial; ++i) {
          const T h = (x(base + i) - m) * r;
          xhat(base + i) = h;
          y(base + i) = scale * h + shift;
        }
      });
}

template <class T>
void batch_norm_backward_sums(const ChannelGeometry& g, const Vec<T>& dy, const Vec<T>& xhat, const Doubles& sums) {
  require_size(static_cast<std::int64_t>(dy.extent(0)), g.size(), "batch_norm_backward_sums dy");
  require_size(static_cast<std::int64_t>(sums.extent(0)), 2 * g.channels, "batch_norm_backward_sums sums");
  const std::int64_t batch = g.batch, channels = g.channels, spatial = g.spatial;
  Kokkos::parallel_for(
      "hpctrain::batch_norm_backward_sums", Range(0, channels), KOKKOS_LAMBDA(const std::int64_t c) {
        double sd = 0.0, sdx = 0.0;
        for (std::int64_t n = 0; n < batch; ++n) {
          const std::int64_t base = (n * channels + c) * spatial;
          for (std::int64_t i = 0; i < spatial; ++i) {
            const double d = static_cast<double>(dy(base + i));
            sd += d;
            sdx += d * static_cast<double>(xhat(base + i));
          }
        }
        sums(c) = sd;
        sums(channels + c) = sdx;
      });
}

template <class T>
void batch_norm_backward_input(const ChannelGeometry& g, const Vec<T>& dy, const Vec<T>& xhat, const Vec<T>& gamma,
                               const Doubles& rstd, const Doubles& sums, double count, const Vec<T>& dx) {
  require_size(static_cast<std::int64_t>(dx.extent(0)), g.size(), "batch_norm_backward_input dx");
  const std::int64_t channels = g.channels, spatial = g.spatial;
  const double inv_count = count > 0 ? 1.0 / count : 0.0;
  Kokkos::parallel_for(
      "hpctrain::batch_norm_backward_input", Range(0, g.batch * channels), KOKKOS_LAMBDA(const std::int64_t row) {
        const std::int64_t c = row % channels;
        const T k = static_cast<T>(static_cast<double>(gamma(c)) * rstd(c));
        const T mean_dy = static_cast<T>(sums(c) * inv_count);
        const T mean_dy_xhat = static_cast<T>(sums(channels + c) * inv_count);
        const std::int64_t base = row * spatial;
        for (std::int64_t i = 0; i < spatial; ++i) {
          dx(base + i) = k * (dy(base + i) - mean_dy - xhat(base + i) * mean_dy_xhat);
        }
      });
}

template <class T>
void global_avg_pool_forward(const ChannelGeometry& g, const Vec<T>& x, const Vec<T>& y) {
  require_size(static_cast<std::int64_t>(x.extent(0)), g.size(), "global_avg_pool_forward x");
  require_size(static_cast<std::int64_t>(y.extent(0)), g.batch * g.channels, "global_avg_pool_forward y");
  const std::int64_t spatial = g.spatial;
  const T inv = T(1) / static_cast<T>(spatial);
  Kokkos::parallel_for(
      "hpctrain::global_avg_pool_forward", Range(0, g.batch * g.channels), KOKKOS_LAMBDA(const std::int64_t row) {
        T s = T(0);
        for (std::int64_t i = 0; i < spatial; ++i) s += x(row * spatial + i);
        y(row) = s * inv;
      });
}

template <class T>
void global_avg_pool_backward(const ChannelGeometry& g, const Vec<T>& dy, const Vec<T>& dx) {
  require_size(static_cast<std::int64_t>(dy.extent(0)), g.batch * g.channels, "global_avg_pool_backward dy");
  require_size(static_cast<std::int64_t>(dx.extent(0)), g.size(), "global_avg_pool_backward dx");
  const std::int64_t spatial = g.spatial;
  const T inv = T(1) / static_cast<T>(spatial);
  Kokkos::parallel_for(
      "hpctrain::global_avg_pool_backward", Range(0, g.batch * g.channels), KOKKOS_LAMBDA(const std::int64_t row) {
        const T v = dy(row) * inv;
        for (std::int64_t i = 0; i < spatial; ++i) dx(row * spatial + i) = v;
      });
}

#define HPCTRAIN_INSTANTIATE(T)                                                                          \
  template void channel_moments<T>(const ChannelGeometry&, const Vec<T>&, const Vec<T>&, const Doubles&); \
  template void batch_norm_forward<T>(const ChannelGeometry&, const Vec<T>&, const Doubles&, const Doubles&, \
                                      const Vec<T>&, const Vec<T>&, const Vec<T>&, const Vec<T>&);       \
  template void batch_norm_backward_sums<T>(const ChannelGeometry&, const Vec<T>&, const Vec<T>&,        \
                                            const Doubles&);                                             \
  template void batch_norm_backward_input<T>(const ChannelGeometry&, const Vec<T>&, const Vec<T>&,       \
                                             const Vec<T>&, const Doubles&, const Doubles&, double,      \
                                             const Vec<T>&);                                             \
  template void global_avg_pool_forward<T>(const ChannelGeometry&, const Vec<T>&, const Vec<T>&);        \
  template void global_avg_pool_backward<T>(const ChannelGeometry&, const Vec<T>&, const Vec<T>&);

HPCTRAIN_INSTANTIATE(float)
HPCTRAIN_INSTANTIATE(double)

}  // namespace hpctrain::core
