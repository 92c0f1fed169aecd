// Multi-head self-attention on x[N, T, D] with H heads of dh = D / H columns.
//
// Forward schedule (R = N T rows):
//   1. qkv[R, 3D] = x W_qkv^T + b_qkv                      one gemm, 6 R D^2 flops
//   2. split: heads[3, N, H, T, dh] (q, k, v)              so each (sample, head) is one
//                                                          contiguous [T, dh] matrix
//   3. per (n, h): S = (1 / sqrt(dh)) q k^T   [T, T]      N H gemms, 2 N T^2 D flops
//      P = softmax of every row of S, less its row max    in place; kept for backward
//      o = P v                                  [T, dh]    N H gemms, 2 N T^2 D flops
//   4. merge: context[R, D] = [o_1 | ... | o_H]
//   5. y[R, D] = context W_out^T + b_out                   one gemm, 2 R D^2 flops
// Backward reverses it: the out projection (dW_out, db_out, dcontext), split dcontext per
// head, dP = do v^T, dv = P^T do, the softmax Jacobian dS = P (dP - rowsum(dP P)) in place,
// dq = dS k / sqrt(dh), dk = dS^T q / sqrt(dh), merge into dqkv[R, 3D], and the qkv
// projection (dW_qkv, db_qkv, dx). Every product is a gemm; the per-head gemms are small
// (T x dh) and numerous (N H), which a batched gemm could fuse later.
#include "hpctrain/base/error.hpp"
#include "hpctrain/core/gemm.hpp"
#include "hpctrain/core/kokkos_compat.hpp"
#include "hpctrain/models/transformer_layers.hpp"
#include "row_affine.hpp"

#include <cmath>

namespace hpctrain::models {

namespace {

using core::Trans;
using Range = Kokkos::RangePolicy<core::ExecSpace>;

/// Extents of the per-head layout [parts, N, H, T, dh].
struct HeadLayout {
  std::int64_t parts, batch, heads, tokens, head_dim;

};

/// head_major[p, n, h, t, j] = rows_major[(n T + t) cols + p D + h dh + j] with D = H dh and
/// cols = parts D (split = true), or the reverse assignment (split = false). One thread per
/// token row: the index arithmetic is one division per row, not five per element (64-bit
/// divisions made the per-element form half of the layer's time in perf).
template <class T>
void move_heads(const HeadLayout& l, bool split, const core::Vec<T>& rows_major,
                const core::Vec<T>& head_major) {
  const std::int64_t dh = l.head_dim, tokens = l.tokens, heads = l.heads, parts = l.parts;
  const std::int64_t batch = l.batch, cols = parts * heads * dh;
  Kokkos::parallel_for(
      split ? "hpctrain::attention::split_heads" : "hpctrain::attention::merge_heads",
      Range(0, batch * tokens), KOKKOS_LAMBDA(const std::int64_t row) {
        const std::int64_t n = row / tokens, t = row % tokens;
        for (std::int64_t p = 0; p < parts; ++p) {
          for (std::int64_t h = 0; h < heads; ++h) {
            const std::int64_t src = row * cols + (p * heads + h) * dh;
            const std::int64_t dst = (((p * batch + n) * heads + h) * tokens + t) * dh;
            for (std::int64_t j = 0; j < dh; ++j) {
              if (split) {
                head_major(dst + j) = rows_major(src + j);
              } else {
                rows_major(src + j) = head_major(dst + j);
              }
            }
          }
        }
      });
}

/// Each row of the [rows, len] matrix in `s` becomes its softmax (stable: the row max is
/// subtracted before exp).
template <class T>
void softmax_rows(std::int64_t rows, std::int64_t len, const core::Vec<T>& s) {
  Kokkos::parallel_for(
      "hpctrain::attention::softmax", Range(0, rows), KOKKOS_LAMBDA(const std::int64_t r) {
        const std::int64_t base = r * len;
        T m = s(base);
        for (std::int64_t j = 1; j < len; ++j) m = s(base + j) > m ? s(base + j) : m;
        T sum = 0;
        for (std::int64_t j = 0; j < len; ++j) {
          const T e = core::kmath::exp(s(base + j) - m);
          s(base + j) = e;
          sum += e;
        }
        const T inv = T(1) / sum;
        for (std::int64_t j = 0; j < len; ++j) s(base + j) *= inv;
      });
}

/// dp <- p (dp - sum_j dp_j p_j) per row: the softmax backward, in place in dp.
template <class T>
void softmax_rows_backward(std::int64_t rows, std::int64_t len, const core::Vec<T>& p,
                           const core::Vec<T>& dp) {
  Kokkos::parallel_for(
      "hpctrain::attention::softmax_backward", Range(0, rows),
      KOKKOS_LAMBDA(const std::int64_t r) {
        const std::int64_t base = r * len;
        T dot = 0;
        for (std::int64_t j = 0; j < len; ++j) dot += dp(base + j) * p(base + j);
        for (std::int64_t j = 0; j < len; ++j) dp(base + j) = p(base + j) * (dp(base + j) - dot);
      });
}

/// Matrix `index` of a tensor holding consecutive [rows, cols] matrices.
template <class T>
core::Matrix<T> block(const Tensor<T>& t, std::int64_t index, std::int64_t rows,
                      std::int64_t cols) {
  const std::int64_t n = rows * cols;
  return core::as_matrix(core::Vec<T>(Kokkos::subview(t.data, std::make_pair(index * n, (index + 1) * n))),
                         rows, cols);
}

}  // namespace

template <class T>
MultiHeadSelfAttention<T>::MultiHeadSelfAttention(std::int64_t dim, std::int64_t heads)
    : dim_(dim), heads_count_(heads) {
  HPCTRAIN_REQUIRE(dim_ > 0 && heads_count_ > 0,
                   "multi_head_self_attention: dim and heads must be positive");
  HPCTRAIN_REQUIRE(dim_ % heads_count_ == 0,
                   "multi_head_self_attention: dim " + std::to_string(dim_) +
                       " is not divisible by " + std::to_string(heads_count_) + " heads");
}

template <class T>
Shape MultiHeadSelfAttention<T>::output_shape(const Shape& s) const {
  HPCTRAIN_REQUIRE(s.size() == 2 && s[0] > 0 && s[1] == dim_,
                   "multi_head_self_attention(" + std::to_string(dim_) +
                       "): samples must be [tokens, " + std::to_string(dim_) + "], got " +
                       core::shape_string(s));
  return s;
}

template <class T>
std::vector<ParameterSpec> MultiHeadSelfAttention<T>::parameter_specs() const {
  const std::int64_t d = dim_;
  return {{"qkv_weight", {3 * d, d}, core::Init::xavier_uniform, d, 3 * d},
          {"qkv_bias", {3 * d}, core::Init::zeros, d, 3 * d},
          {"out_weight", {d, d}, core::Init::fan_in_uniform, d, d},
          {"out_bias", {d}, core::Init::zeros, d, d}};
}

template <class T>
Tensor<T> MultiHeadSelfAttention<T>::forward(const Tensor<T>& x, bool /*train*/) {
  HPCTRAIN_REQUIRE(x.rank() == 3 && x.dim(2) == dim_,
                   "multi_head_self_attention: input must be [N, tokens, " +
                       std::to_string(dim_) + "], got " + core::shape_string(x.shape));
  x_ = x;
  batch_ = x.dim(0);
  tokens_ = x.dim(1);
  const std::int64_t rows = batch_ * tokens_, dh = dim_ / heads_count_;
  const HeadLayout qkv_layout{3, batch_, heads_count_, tokens_, dh};
  core::ensure_shape(qkv_, "hpctrain::attention::qkv", {rows, 3 * dim_});
  core::ensure_shape(heads_, "hpctrain::attention::heads", {3, batch_, heads_count_, tokens_, dh});
  core::ensure_shape(context_, "hpctrain::attention::context", {rows, dim_});
  core::ensure_shape(y_, "hpctrain::attention::y", x.shape);
  detail::row_affine_forward(x.data, rows, dim_, 3 * dim_, this->param(0).data,
                             this->param(1).data, qkv_.data);
  move_heads(qkv_layout, true, qkv_.data, heads_.data);
  attend();
  move_heads(HeadLayout{1, batch_, heads_count_, tokens_, dh}, false, context_.data,
             context_heads_.data);
  detail::row_affine_forward(context_.data, rows, dim_, dim_, this->param(2).data,
                             this->param(3).data, y_.data);
  return y_;
}

template <class T>
void MultiHeadSelfAttention<T>::attend() {
  const std::int64_t dh = dim_ / heads_count_, t = tokens_, nh = batch_ * heads_count_;
  const T scale = T(1) / static_cast<T>(std::sqrt(static_cast<double>(dh)));
  core::ensure_shape(attn_, "hpctrain::attention::probabilities", {batch_, heads_count_, t, t});
  core::ensure_shape(context_heads_, "hpctrain::attention::context_heads",
                     {batch_, heads_count_, t, dh});
  for (std::int64_t b = 0; b < nh; ++b) {
    core::gemm(Trans::no, Trans::yes, scale, block(heads_, b, t, dh),
               block(heads_, nh + b, t, dh), T(0), block(attn_, b, t, t));
  }
  softmax_rows(nh * t, t, attn_.data);
  for (std::int64_t b = 0; b < nh; ++b) {
    core::gemm(Trans::no, Trans::no, T(1), block(attn_, b, t, t),
               block(heads_, 2 * nh + b, t, dh), T(0), block(context_heads_, b, t, dh));
  }
}

template <class T>
Tensor<T> MultiHeadSelfAttention<T>::backward(const Tensor<T>& dy, bool need_input_grad) {
  const std::int64_t rows = batch_ * tokens_, dh = dim_ / heads_count_;
  HPCTRAIN_REQUIRE(dy.size() == rows * dim_, "multi_head_self_attention: output gradient shape " +
                                                 core::shape_string(dy.shape) + " does not match");
  core::ensure_shape(dcontext_, "hpctrain::attention::dcontext", {rows, dim_});
  core::ensure_shape(dcontext_heads_, "hpctrain::attention::dcontext_heads",
                     {batch_, heads_count_, tokens_, dh});
  core::ensure_shape(dqkv_, "hpctrain::attention::dqkv", {rows, 3 * dim_});
  detail::row_affine_backward(dy.data, context_.data, rows, dim_, dim_, this->param(2).data,
                              this->grad(2).data, this->grad(3).data, dcontext_.data);
  move_heads(HeadLayout{1, batch_, heads_count_, tokens_, dh}, true, dcontext_.data,
             dcontext_heads_.data);
  attend_backward();
  move_heads(HeadLayout{3, batch_, heads_count_, tokens_, dh}, false, dqkv_.data, dheads_.data);
  core::Vec<T> dx;
  if (need_input_grad) {
    core::ensure_shape(dx_, "hpctrain::attention::dx", x_.shape);
    dx = dx_.data;
  }
  detail::row_affine_backward(dqkv_.data, x_.data, rows, dim_, 3 * dim_, this->param(0).data,
                              this->grad(0).data, this->grad(1).data, dx);
  return need_input_grad ? dx_ : Tensor<T>();
}

template <class T>
void MultiHeadSelfAttention<T>::attend_backward() {
  const std::int64_t dh = dim_ / heads_count_, t = tokens_, nh = batch_ * heads_count_;
  const T scale = T(1) / static_cast<T>(std::sqrt(static_cast<double>(dh)));
  core::ensure_shape(dattn_, "hpctrain::attention::dprobabilities", attn_.shape);
  core::ensure_shape(dheads_, "hpctrain::attention::dheads", heads_.shape);
  for (std::int64_t b = 0; b < nh; ++b) {
    const core::Matrix<T> dout = block(dcontext_heads_, b, t, dh);
    core::gemm(Trans::no, Trans::yes, T(1), dout, block(heads_, 2 * nh + b, t, dh), T(0),
               block(dattn_, b, t, t));
    core::gemm(Trans::yes, Trans::no, T(1), block(attn_, b, t, t), dout, T(0),
               block(dheads_, 2 * nh + b, t, dh));
  }
  softmax_rows_backward(nh * t, t, attn_.data, dattn_.data);
  for (std::int64_t b = 0; b < nh; ++b) {
    const core::Matrix<T> ds = block(dattn_, b, t, t);
    core::gemm(Trans::no, Trans::no, scale, ds, block(heads_, nh + b, t, dh), T(0),
               block(dheads_, b, t, dh));
    core::gemm(Trans::yes, Trans::no, scale, ds, block(heads_, b, t, dh), T(0),
               block(dheads_, nh + b, t, dh));
  }
}

template class MultiHeadSelfAttention<float>;
template class MultiHeadSelfAttention<double>;

}  // namespace hpctrain::models
