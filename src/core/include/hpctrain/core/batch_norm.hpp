#pragma once
/// @file
/// Batch-normalisation and global-average-pooling kernels over NCHW tensors.
///
/// A channel's statistics run over M = N * H * W elements. Sums are taken in double; moments
/// are shifted by a per-channel `shift` (the running mean, the same on every rank), so the
/// variance E[(x - s)^2] - E[x - s]^2 does not cancel catastrophically when |mean| >> std.
/// Kernels that produce parameter gradients *accumulate* (like the bias kernels); the others
/// overwrite their output.

#include "hpctrain/core/tensor.hpp"

#include <cstdint>

namespace hpctrain::core {

/// Extents of an NCHW tensor seen per channel.
struct ChannelGeometry {
  std::int64_t batch = 0;
  std::int64_t channels = 0;
  std::int64_t spatial = 0;  ///< H * W
  std::int64_t size() const { return batch * channels * spatial; }
};

/// Per-channel statistics in double: sums[c] = sum (x - shift[c]), sums[C + c] = sum (x - shift[c])^2.
template <class T>
void channel_moments(const ChannelGeometry& g, const Vec<T>& x, const Vec<T>& shift,
                     const Kokkos::View<double*, MemSpace>& sums);

/// xhat = (x - mean[c]) * rstd[c]; y = gamma[c] * xhat + beta[c], then max(y, 0) when `relu`
/// (batch norm followed by ReLU in one pass). xhat is kept for backward.
template <class T>
void batch_norm_forward(const ChannelGeometry& g, const Vec<T>& x,
                        const Kokkos::View<double*, MemSpace>& mean,
                        const Kokkos::View<double*, MemSpace>& rstd, const Vec<T>& gamma,
                        const Vec<T>& beta, bool relu, const Vec<T>& xhat, const Vec<T>& y);

/// Per-channel sums for backward, in double: sums[c] = sum g, sums[C + c] = sum g * xhat, with
/// g = dy, or with `relu` g = dy where the forward output y > 0, else 0 (the fused ReLU's backward).
template <class T>
void batch_norm_backward_sums(const ChannelGeometry& g, const Vec<T>& dy, const Vec<T>& xhat,
                              bool relu, const Vec<T>& y, const Kokkos::View<double*, MemSpace>& sums);

/// dx = gamma rstd (g - sum_g / count - xhat * sum_g_xhat / count), with g as in
/// batch_norm_backward_sums, `sums` as it wrote them and `count` the elements per channel they
/// cover (the global batch's for synchronised statistics). With `count` 0 (statistics that are
/// constants, i.e. evaluation mode): dx = gamma rstd g.
template <class T>
void batch_norm_backward_input(const ChannelGeometry& g, const Vec<T>& dy, const Vec<T>& xhat,
                               bool relu, const Vec<T>& y, const Vec<T>& gamma,
                               const Kokkos::View<double*, MemSpace>& rstd,
                               const Kokkos::View<double*, MemSpace>& sums, double count,
                               const Vec<T>& dx);

/// y[n, c] = mean over H * W of x[n, c, :, :].
template <class T>
void global_avg_pool_forward(const ChannelGeometry& g, const Vec<T>& x, const Vec<T>& y);
/// dx[n, c, h, w] = dy[n, c] / (H * W).
template <class T>
void global_avg_pool_backward(const ChannelGeometry& g, const Vec<T>& dy, const Vec<T>& dx);

}  // namespace hpctrain::core
