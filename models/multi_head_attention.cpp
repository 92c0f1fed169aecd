// Multi-head self-attention on x[N, T, D] with H heads of dh = D / H columns.
//
// Forward schedule (R = N T rows):
//   1. qkv[3, R, D]: part p (q, k, v) = x W_p^T + b_p      three gemms (W_p, b_p: rows
//                                                          p D.. of W_qkv, b_qkv), 6 R D^2 flops
//   2. S[N, H, T, T] = (1 / sqrt(dh)) q k^T                one batched gemm over (n, h), 2 N T^2 D
//      flops; q and k are read in place (head h of sample n is the [T, dh] block at rows n T..,
//      columns h dh.. of part q or k: strides, no copy)
//   3. P = softmax of every row of S, less its row max    in place; kept for backward
//   4. context[R, D] = P v                                 one batched gemm, 2 N T^2 D flops,
//                                                          written straight into row layout
//   5. y[R, D] = context W_out^T + b_out                   one gemm, 2 R D^2 flops
// Backward reverses it: the out projection (dW_out, db_out, dcontext), dP = dcontext v^T,
// dv = P^T dcontext, the softmax Jacobian dS = P (dP - rowsum(dP P)) in place,
// dq = dS k / sqrt(dh), dk = dS^T q / sqrt(dh) -- four batched gemms reading qkv / dcontext
// in place and writing their parts of dqkv[3, R, D] directly -- and the qkv projection per
// part (dW_p += dqkv_p^T x, db_p, dx = sum_p dqkv_p W_p). Per step: 6 batched calls whatever
// N and H; nothing is allocated while the batch shape repeats.
//
// Steps 2-4 and their backward are core::attention_forward / attention_backward.
//
// Leaf rows (deterministic training's grouped passes, L samples a leaf): the projections run in
// leaves of L T rows (row_affine.hpp: each leaf's rows as a call on it alone, the parameter
// gradients written as the leaves' tree); steps 2-4 and their backward run once per
// leaf, on that leaf's samples, with the shapes a pass of that leaf alone uses -- oneDNN's
// batched matmul is not documented to give a sample the same bits in a larger batch -- side by
// side on the rank's threads where oneDNN is held at one (core/attention.hpp).
//
// Why part-major [3, R, D] and not PyTorch's [R, 3D]: each part is then a dense [N, T, H, dh]
// tensor, which oneDNN 2.6's brgemm matmul takes as a 4-D batch; inside [R, 3D] rows (padded
// to 3D) it fell back to its jit sgemm at ~10 GFLOP/s, 30 % of a step.
#include "hpctrain/base/error.hpp"
#include "hpctrain/core/attention.hpp"
#include "hpctrain/core/elementwise.hpp"
#include "hpctrain/core/gemm.hpp"
#include "hpctrain/models/transformer_layers.hpp"
#include "row_affine.hpp"

namespace hpctrain::models {

namespace {

using core::Trans;

/// Elements [index size, (index + 1) size) of `v`: part `index` of a part-major buffer.
template <class T>
core::Vec<T> part(const core::Vec<T>& v, std::int64_t index, std::int64_t size) {
  return Kokkos::subview(v, std::make_pair(index * size, (index + 1) * size));
}

/// The qkv projection's backward from part-major dqkv [3, R, D]: per part p, dW_p += dqkv_p^T x,
/// db_p += column sums of dqkv_p, and (when dx is non-empty) dx = sum_p dqkv_p W_p, the parts
/// added in order. 3 x (2 R D^2 + 2 R D^2) flops, as one [R, 3D] projection. With `leaf_rows`
/// > 0 the rows are in leaves as row_affine_backward() has them: dW_p and db_p written as the
/// leaves' tree, each leaf's rows of dx as a call on that leaf alone gives them.
template <class T>
void qkv_projection_backward(const core::Vec<T>& dqkv, const core::Vec<T>& x, std::int64_t rows,
                             std::int64_t dim, const core::Vec<T>& w, const core::Vec<T>& dw,
                             const core::Vec<T>& db, const core::Vec<T>& dx, std::int64_t leaf_rows) {
  const core::Matrix<T> xm = core::as_matrix(x, rows, dim);
  for (std::int64_t p = 0; p < 3; ++p) {
    const core::Matrix<T> dym = core::as_matrix(part(dqkv, p, rows * dim), rows, dim);
    const core::Matrix<T> dwm = core::as_matrix(part(dw, p, dim * dim), dim, dim);
    if (leaf_rows <= 0) {
      core::gemm(Trans::yes, Trans::no, T(1), dym, xm, T(1), dwm);
      core::accumulate_column_sums(dym, part(db, p, dim));
    } else {
      core::gemm_tn_leaf_tree(leaf_rows, dym, xm, dwm);
      core::column_sums_leaf_tree(leaf_rows, dym, part(db, p, dim));
    }
    if (dx.data() == nullptr) continue;
    const core::Matrix<T> wm = core::as_matrix(part(w, p, dim * dim), dim, dim), dxm = core::as_matrix(dx, rows, dim);
    const T beta = p == 0 ? T(0) : T(1);
    if (leaf_rows <= 0) {
      core::gemm(Trans::no, Trans::no, T(1), dym, wm, beta, dxm);
    } else {
      core::gemm_in_leaves(leaf_rows, Trans::no, T(1), dym, wm, beta, dxm);
    }
  }
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
  const std::int64_t rows = batch_ * tokens_;
  core::ensure_shape(qkv_, "hpctrain::attention::qkv", {3, rows, dim_});
  core::ensure_shape(context_, "hpctrain::attention::context", {rows, dim_});
  core::ensure_shape(y_, "hpctrain::attention::y", x.shape);
  core::ensure_shape(attn_, "hpctrain::attention::probabilities", {batch_, heads_count_, tokens_, tokens_});
  // Leaves (L samples, L T rows): the projections in leaves of rows; the attention (oneDNN's
  // batched matmul, whose bits are not documented to be independent of the batch) once per leaf,
  // as a pass of that leaf alone calls it. Without: one call over all samples.
  const std::int64_t leaf = this->gradient_leaf_rows(), leaf_rows = leaf * tokens_;
  for (std::int64_t p = 0; p < 3; ++p) {
    detail::row_affine_forward(x.data, rows, dim_, dim_, part(this->param(0).data, p, dim_ * dim_),
                               part(this->param(1).data, p, dim_), part(qkv_.data, p, rows * dim_), leaf_rows);
  }
  core::attention_forward<T>({batch_, tokens_, dim_, heads_count_}, leaf, qkv_.data, attn_.data, context_.data);
  detail::row_affine_forward(context_.data, rows, dim_, dim_, this->param(2).data,
                             this->param(3).data, y_.data, leaf_rows);
  return y_;
}

template <class T>
Tensor<T> MultiHeadSelfAttention<T>::backward(const Tensor<T>& dy, bool need_input_grad) {
  const std::int64_t rows = batch_ * tokens_;
  HPCTRAIN_REQUIRE(dy.size() == rows * dim_, "multi_head_self_attention: output gradient shape " +
                                                 core::shape_string(dy.shape) + " does not match");
  core::ensure_shape(dcontext_, "hpctrain::attention::dcontext", {rows, dim_});
  core::ensure_shape(dqkv_, "hpctrain::attention::dqkv", {3, rows, dim_});
  core::ensure_shape(dattn_, "hpctrain::attention::dprobabilities", attn_.shape);
  // With leaves as in forward(); the gradients are then written (the model zeroes them first).
  const std::int64_t leaf = this->gradient_leaf_rows(), leaf_rows = leaf * tokens_;
  detail::row_affine_backward(dy.data, context_.data, rows, dim_, dim_, this->param(2).data,
                              this->grad(2).data, this->grad(3).data, dcontext_.data, false, leaf_rows);
  core::attention_backward<T>({batch_, tokens_, dim_, heads_count_}, leaf, qkv_.data, attn_.data, dcontext_.data,
                              dattn_.data, dqkv_.data);
  core::Vec<T> dx;
  if (need_input_grad) {
    core::ensure_shape(dx_, "hpctrain::attention::dx", x_.shape);
    dx = dx_.data;
  }
  qkv_projection_backward(dqkv_.data, x_.data, rows, dim_, this->param(0).data,
                          this->grad(0).data, this->grad(1).data, dx, leaf_rows);
  return need_input_grad ? dx_ : Tensor<T>();
}

template class MultiHeadSelfAttention<float>;
template class MultiHeadSelfAttention<double>;

}  // namespace hpctrain::models
