#pragma once
/// @file
/// 2-D convolution and max-pooling on NCHW tensors.
///
/// Two implementations sit behind conv2d_forward / conv2d_backward, as Kokkos Kernels puts a
/// vendor library (TPL) behind the same call as its portable kernel:
/// - **oneDNN** (float, when built with HPCTRAIN_ENABLE_ONEDNN): direct convolution kernels
///   (`jit:avx512_core` and friends) on oneDNN's blocked layouts; primitives are created once
///   per shape and cached in the workspace; x, y, weights and gradients stay NCHW / OIHW at
///   this interface (reorders inside).
/// - **portable** (every type, every backend): the im2col + gemm path below, the reference
///   and the fallback.
/// conv_backend() picks (HPCTRAIN_CONV_BACKEND=onednn|portable, default: oneDNN when built);
/// both give the same results up to float rounding and are tested against the same float64
/// references and finite differences. With a fixed thread count, both are deterministic.
///
/// The portable path lowers the whole batch at once: im2col writes col[(c,kh,kw), (n,oh,ow)], one
/// gemm computes yt[f, (n,oh,ow)] = W[f, (c,kh,kw)] col, and a permute kernel writes y in NCHW
/// adding the bias. Backward: dW += dyt col^T, db += row sums of dyt, dcol = W^T dyt and col2im
/// gathers dcol into dx (a gather, so no atomics). Cost: 2 F C K^2 N Ho Wo flops per gemm;
/// workspace (C K^2 + F) N Ho Wo elements.

#include "hpctrain/core/tensor.hpp"

#include <cstdint>
#include <memory>
#include <vector>

namespace hpctrain::core {

struct Conv2dGeometry {
  std::int64_t batch = 0;
  std::int64_t in_channels = 0;
  std::int64_t height = 0;
  std::int64_t width = 0;
  std::int64_t out_channels = 0;
  std::int64_t kernel = 1;
  std::int64_t stride = 1;
  std::int64_t pad = 0;

  std::int64_t out_height() const { return (height + 2 * pad - kernel) / stride + 1; }
  std::int64_t out_width() const { return (width + 2 * pad - kernel) / stride + 1; }
  /// Rows of the im2col matrix: C K K.
  std::int64_t col_rows() const { return in_channels * kernel * kernel; }
  /// Columns of the im2col matrix: N Ho Wo.
  std::int64_t col_cols() const { return batch * out_height() * out_width(); }
  /// Throws unless every extent is positive and the kernel fits the padded input.
  void validate() const;
};

/// col[(c,kh,kw), (n,oh,ow)] = x[n, c, oh*s - p + kh, ow*s - p + kw] (0 outside).
template <class T>
void im2col(const Conv2dGeometry& g, const Vec<T>& x, const Vec<T>& col);

/// dx[n,c,h,w] = sum of dcol entries that im2col took from (n,c,h,w). Overwrites dx.
template <class T>
void col2im(const Conv2dGeometry& g, const Vec<T>& dcol, const Vec<T>& dx);

/// Which implementation the convolutions use.
enum class ConvBackend { portable, onednn };

/// The backend conv2d_forward/backward use for float: HPCTRAIN_CONV_BACKEND (onednn|portable;
/// an unknown value throws, naming it), else oneDNN when built with it, else portable. double
/// always uses the portable path.
ConvBackend conv_backend();
/// Overrides conv_backend() for the rest of the process (tests run both paths). Throws when
/// asked for oneDNN in a build without it.
void set_conv_backend(ConvBackend backend);
/// True when this build has the oneDNN path.
bool onednn_available();
/// A backend choice from the environment variable `variable` (HPCTRAIN_CONV_BACKEND,
/// HPCTRAIN_GEMM_BACKEND): "onednn" -> true, `other` -> false, unset or empty -> whether oneDNN
/// is built. Throws naming the variable on any other value, or on onednn in a build without it.
bool onednn_from_environment(const char* variable, const char* other, const char* what);
/// "onednn" or "portable".
const char* conv_backend_name(ConvBackend backend);

/// oneDNN's primitives and reordered buffers for one geometry (opaque; conv_onednn.cpp).
struct OnednnConvState;

/// Scratch space one convolution needs; sized on first use, reused while shapes stay.
template <class T>
struct Conv2dWorkspace {
  Vec<T> col;   ///< [C K K, N Ho Wo], kept from forward for backward (portable path)
  Vec<T> yt;    ///< [F, N Ho Wo]
  Vec<T> dcol;  ///< [C K K, N Ho Wo]
  /// The oneDNN path's state, keyed by geometry (null until the first oneDNN call).
  std::shared_ptr<OnednnConvState> onednn;
  /// The backend the last conv2d_forward used: backward must use the same one.
  ConvBackend forward_backend = ConvBackend::portable;
  void reserve(const Conv2dGeometry& g);
};

/// y[N, F, Ho, Wo] = conv(x[N, C, H, W], w[F, C, K, K]) + b[F].
template <class T>
void conv2d_forward(const Conv2dGeometry& g, const Vec<T>& x, const Vec<T>& w, const Vec<T>& b,
                    Conv2dWorkspace<T>& ws, const Vec<T>& y);

/// dw += dL/dw, db += dL/db, and dx = dL/dx when dx is non-empty. Needs the workspace filled
/// by the conv2d_forward of the same input.
template <class T>
void conv2d_backward(const Conv2dGeometry& g, const Vec<T>& w, const Vec<T>& dy,
                     Conv2dWorkspace<T>& ws, const Vec<T>& dw, const Vec<T>& db,
                     const Vec<T>& dx);

/// Deterministic training's grouped passes (models::Layer::supports_gradient_leaves): a batch
/// cut into leaves of `leaf_rows` rows (the last may be shorter), each leaf run as a batch of
/// its rows alone, in a workspace of its own (the forward's state is kept for the backward).
template <class T>
struct Conv2dLeaves {
  std::vector<Conv2dWorkspace<T>> leaf;  ///< one per leaf
  Vec<T> grads;                          ///< per leaf: its weight gradient [F C K K], then its bias gradient [F]
};

/// y = conv2d_forward of each leaf's rows alone: every output row has the bits a batch of its
/// leaf alone gives it. On oneDNN, while deterministic training holds it at one thread
/// (held_kernel_threads() > 0), the leaves run side by side on the held kernel threads, oneDNN
/// on one thread in each (as in a pass per leaf); otherwise one after another.
template <class T>
void conv2d_forward_in_leaves(std::int64_t leaf_rows, const Conv2dGeometry& g, const Vec<T>& x, const Vec<T>& w,
                              const Vec<T>& b, Conv2dLeaves<T>& ws, const Vec<T>& y);

/// The backward of conv2d_forward_in_leaves on the same input: dx as each leaf's rows alone give
/// it (when non-empty), and dw += W, db += B, where W and B are the pairwise tree
/// (core/leaf_tree.hpp) of the leaves' gradients, each leaf's as conv2d_backward adds it into a
/// zeroed buffer: so a zeroed dw, db get the bits coll::TreeSum gives a pass per leaf.
template <class T>
void conv2d_backward_in_leaves(std::int64_t leaf_rows, const Conv2dGeometry& g, const Vec<T>& w, const Vec<T>& dy,
                               Conv2dLeaves<T>& ws, const Vec<T>& dw, const Vec<T>& db, const Vec<T>& dx);

struct Pool2dGeometry {
  std::int64_t batch = 0;
  std::int64_t channels = 0;
  std::int64_t height = 0;
  std::int64_t width = 0;
  std::int64_t kernel = 2;
  std::int64_t stride = 2;

  std::int64_t out_height() const { return (height - kernel) / stride + 1; }
  std::int64_t out_width() const { return (width - kernel) / stride + 1; }
  void validate() const;
};

/// y = max over each window; argmax[o] = flat index into x of the maximum (first on ties).
template <class T>
void maxpool2d_forward(const Pool2dGeometry& g, const Vec<T>& x, const Vec<T>& y,
                       const Kokkos::View<std::int64_t*, MemSpace>& argmax);

/// dx = 0, then dx[argmax[o]] += dy[o] (atomic when windows overlap, stride < kernel; a plain
/// store when they cannot).
template <class T>
void maxpool2d_backward(const Pool2dGeometry& g, const Vec<T>& dy,
                        const Kokkos::View<std::int64_t*, MemSpace>& argmax, const Vec<T>& dx);

}  // namespace hpctrain::core
