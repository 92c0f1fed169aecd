#include "hpctrain/core/batch_norm.hpp"

#include "hpctrain/base/error.hpp"
#include "host_parallel.hpp"

namespace hpctrain::core {

namespace {

using Doubles = Kokkos::View<double*, MemSpace>;

void require_size(std::int64_t have, std::int64_t want, const char* what) {
  HPCTRAIN_REQUIRE(have == want, std::string(what) + ": " + std::to_string(have) +
                                     " elements where " + std::to_string(want) + " are needed");
}

}  // namespace

// Reductions run over each channel's N * H * W elements in a fixed order: within a row of H * W
// elements, kLanes independent partial sums in T (element i goes to lane i % kLanes), added lane
// by lane; the rows' sums are added in double, row after row. The order never depends on the
// thread count (a channel or a row is one thread's: detail::host_parallel_for shares them out
// on the rank's OpenMP team), so neither do the bits; the lanes give the compiler independent
// chains to vectorise (one serial chain of double additions was 10-13 % of a resnet step:
// measured).
constexpr int kLanes = 8;

/// Sum of v(i) and of v(i)^2 over one row, v(i) = x[i] - shift.
template <class T>
KOKKOS_INLINE_FUNCTION void shifted_row_moments(const T* x, std::int64_t n, T shift, double& s1, double& s2) {
  T a[kLanes] = {}, b[kLanes] = {};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const T d = x[i + l] - shift;
      a[l] += d;
      b[l] += d * d;
    }
  }
  for (int l = 0; i < n; ++i, ++l) {
    const T d = x[i] - shift;
    a[l] += d;
    b[l] += d * d;
  }
  T ta = 0, tb = 0;
  for (int l = 0; l < kLanes; ++l) {
    ta += a[l];
    tb += b[l];
  }
  s1 += static_cast<double>(ta);
  s2 += static_cast<double>(tb);
}

/// g(i) = dy[i], or with Relu dy[i] where out[i] > 0, else 0. Both loaded unconditionally: a
/// select, no branch, so the loops vectorise (a run-time flag here kept them scalar: measured).
template <bool Relu, class T>
KOKKOS_FORCEINLINE_FUNCTION T masked(const T* dy, const T* out, std::int64_t i) {
  if constexpr (Relu) {
    const T d = dy[i];
    return out[i] > T(0) ? d : T(0);
  } else {
    return dy[i];
  }
}

/// Sum of g(i) and of g(i) xhat[i] over one row (g as in masked()).
template <bool Relu, class T>
KOKKOS_INLINE_FUNCTION void gradient_row_sums(const T* dy, const T* xhat, const T* out, std::int64_t n, double& sd,
                                              double& sdx) {
  T a[kLanes] = {}, b[kLanes] = {};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const T g = masked<Relu>(dy, out, i + l);
      a[l] += g;
      b[l] += g * xhat[i + l];
    }
  }
  for (int l = 0; i < n; ++i, ++l) {
    const T g = masked<Relu>(dy, out, i);
    a[l] += g;
    b[l] += g * xhat[i];
  }
  T ta = 0, tb = 0;
  for (int l = 0; l < kLanes; ++l) {
    ta += a[l];
    tb += b[l];
  }
  sd += static_cast<double>(ta);
  sdx += static_cast<double>(tb);
}

template <class T>
void channel_moments(const ChannelGeometry& g, const Vec<T>& x, const Vec<T>& shift, const Doubles& sums) {
  require_size(static_cast<std::int64_t>(x.extent(0)), g.size(), "channel_moments x");
  require_size(static_cast<std::int64_t>(sums.extent(0)), 2 * g.channels, "channel_moments sums");
  const std::int64_t batch = g.batch, channels = g.channels, spatial = g.spatial;
  detail::host_parallel_for(
      "hpctrain::channel_moments", channels, KOKKOS_LAMBDA(const std::int64_t c) {
        double s1 = 0.0, s2 = 0.0;
        for (std::int64_t n = 0; n < batch; ++n) {
          shifted_row_moments(x.data() + (n * channels + c) * spatial, spatial, shift(c), s1, s2);
        }
        sums(c) = s1;
        sums(channels + c) = s2;
      },
      batch * spatial);
}

template <class T>
void batch_norm_forward(const ChannelGeometry& g, const Vec<T>& x, const Doubles& mean, const Doubles& rstd,
                        const Vec<T>& gamma, const Vec<T>& beta, bool relu, const Vec<T>& xhat, const Vec<T>& y) {
  require_size(static_cast<std::int64_t>(x.extent(0)), g.size(), "batch_norm_forward x");
  require_size(static_cast<std::int64_t>(y.extent(0)), g.size(), "batch_norm_forward y");
  require_size(static_cast<std::int64_t>(xhat.extent(0)), g.size(), "batch_norm_forward xhat");
  const std::int64_t channels = g.channels, spatial = g.spatial;
  detail::host_parallel_for(
      "hpctrain::batch_norm_forward", g.batch * channels, KOKKOS_LAMBDA(const std::int64_t r) {
        const std::int64_t c = r % channels;
        const T m = static_cast<T>(mean(c)), k = static_cast<T>(rstd(c));
        const T scale = gamma(c), shift = beta(c);
        const T* in = x.data() + r * spatial;
        T* h = xhat.data() + r * spatial;
        T* out = y.data() + r * spatial;
        for (std::int64_t i = 0; i < spatial; ++i) {
          const T v = (in[i] - m) * k;
          h[i] = v;
          out[i] = scale * v + shift;
        }
        if (relu) {
          for (std::int64_t i = 0; i < spatial; ++i) {
            const T o = out[i];  // in cache: the row was just written
            out[i] = o > T(0) ? o : T(0);
          }
        }
      },
      spatial);
}

template <class T>
void batch_norm_backward_sums(const ChannelGeometry& g, const Vec<T>& dy, const Vec<T>& xhat, bool relu,
                              const Vec<T>& y, const Doubles& sums) {
  require_size(static_cast<std::int64_t>(dy.extent(0)), g.size(), "batch_norm_backward_sums dy");
  require_size(static_cast<std::int64_t>(sums.extent(0)), 2 * g.channels, "batch_norm_backward_sums sums");
  if (relu) require_size(static_cast<std::int64_t>(y.extent(0)), g.size(), "batch_norm_backward_sums y");
  const std::int64_t batch = g.batch, channels = g.channels, spatial = g.spatial;
  const Vec<T> mask_source = relu ? y : xhat;  // read, never used, when there is no ReLU
  detail::host_parallel_for(
      "hpctrain::batch_norm_backward_sums", channels, KOKKOS_LAMBDA(const std::int64_t c) {
        double sd = 0.0, sdx = 0.0;
        for (std::int64_t n = 0; n < batch; ++n) {
          const std::int64_t base = (n * channels + c) * spatial;
          if (relu) {
            gradient_row_sums<true>(dy.data() + base, xhat.data() + base, mask_source.data() + base, spatial, sd, sdx);
          } else {
            gradient_row_sums<false>(dy.data() + base, xhat.data() + base, mask_source.data() + base, spatial, sd, sdx);
          }
        }
        sums(c) = sd;
        sums(channels + c) = sdx;
      },
      batch * spatial);
}

template <class T>
void batch_norm_backward_input(const ChannelGeometry& g, const Vec<T>& dy, const Vec<T>& xhat, bool relu,
                               const Vec<T>& y, const Vec<T>& gamma, const Doubles& rstd, const Doubles& sums,
                               double count, const Vec<T>& dx) {
  require_size(static_cast<std::int64_t>(dx.extent(0)), g.size(), "batch_norm_backward_input dx");
  const std::int64_t channels = g.channels, spatial = g.spatial;
  const double inv_count = count > 0 ? 1.0 / count : 0.0;
  const Vec<T> mask_source = relu ? y : xhat;
  detail::host_parallel_for(
      "hpctrain::batch_norm_backward_input", g.batch * channels, KOKKOS_LAMBDA(const std::int64_t r) {
        const std::int64_t c = r % channels;
        const T k = static_cast<T>(static_cast<double>(gamma(c)) * rstd(c));
        const T mean_g = static_cast<T>(sums(c) * inv_count);
        const T mean_g_xhat = static_cast<T>(sums(channels + c) * inv_count);
        const T* d = dy.data() + r * spatial;
        const T* h = xhat.data() + r * spatial;
        const T* out = mask_source.data() + r * spatial;
        T* o = dx.data() + r * spatial;
        if (relu) {
          for (std::int64_t i = 0; i < spatial; ++i) o[i] = k * (masked<true>(d, out, i) - mean_g - h[i] * mean_g_xhat);
        } else {
          for (std::int64_t i = 0; i < spatial; ++i) o[i] = k * (d[i] - mean_g - h[i] * mean_g_xhat);
        }
      },
      spatial);
}

template <class T>
void global_avg_pool_forward(const ChannelGeometry& g, const Vec<T>& x, const Vec<T>& y) {
  require_size(static_cast<std::int64_t>(x.extent(0)), g.size(), "global_avg_pool_forward x");
  require_size(static_cast<std::int64_t>(y.extent(0)), g.batch * g.channels, "global_avg_pool_forward y");
  const std::int64_t spatial = g.spatial;
  const T inv = T(1) / static_cast<T>(spatial);
  detail::host_parallel_for(
      "hpctrain::global_avg_pool_forward", g.batch * g.channels, KOKKOS_LAMBDA(const std::int64_t row) {
        T s = T(0);
        for (std::int64_t i = 0; i < spatial; ++i) s += x(row * spatial + i);
        y(row) = s * inv;
      },
      spatial);
}

template <class T>
void global_avg_pool_backward(const ChannelGeometry& g, const Vec<T>& dy, const Vec<T>& dx) {
  require_size(static_cast<std::int64_t>(dy.extent(0)), g.batch * g.channels, "global_avg_pool_backward dy");
  require_size(static_cast<std::int64_t>(dx.extent(0)), g.size(), "global_avg_pool_backward dx");
  const std::int64_t spatial = g.spatial;
  const T inv = T(1) / static_cast<T>(spatial);
  detail::host_parallel_for(
      "hpctrain::global_avg_pool_backward", g.batch * g.channels, KOKKOS_LAMBDA(const std::int64_t row) {
        const T v = dy(row) * inv;
        for (std::int64_t i = 0; i < spatial; ++i) dx(row * spatial + i) = v;
      },
      spatial);
}

#define HPCTRAIN_INSTANTIATE(T)                                                                          \
  template void channel_moments<T>(const ChannelGeometry&, const Vec<T>&, const Vec<T>&, const Doubles&); \
  template void batch_norm_forward<T>(const ChannelGeometry&, const Vec<T>&, const Doubles&, const Doubles&, \
                                      const Vec<T>&, const Vec<T>&, bool, const Vec<T>&, const Vec<T>&); \
  template void batch_norm_backward_sums<T>(const ChannelGeometry&, const Vec<T>&, const Vec<T>&, bool,  \
                                            const Vec<T>&, const Doubles&);                              \
  template void batch_norm_backward_input<T>(const ChannelGeometry&, const Vec<T>&, const Vec<T>&, bool, \
                                             const Vec<T>&, const Vec<T>&, const Doubles&, const Doubles&, \
                                             double, const Vec<T>&);                                     \
  template void global_avg_pool_forward<T>(const ChannelGeometry&, const Vec<T>&, const Vec<T>&);        \
  template void global_avg_pool_backward<T>(const ChannelGeometry&, const Vec<T>&, const Vec<T>&);

HPCTRAIN_INSTANTIATE(float)
HPCTRAIN_INSTANTIATE(double)

}  // namespace hpctrain::core
