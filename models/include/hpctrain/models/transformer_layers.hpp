#pragma once
/// @file
/// The leaf layers of a ViT-style encoder (Dosovitskiy et al. 2021): PatchEmbedding,
/// LayerNorm, MultiHeadSelfAttention, TokenDense and SelectToken. Residual connections are a
/// composite layer of their own; GELU is ActivationLayer(Activation::gelu), which takes any
/// shape.
///
/// Shapes below are sample shapes (the batch N is the leading extent of every tensor and is
/// left out); all tensors are row-major. As for every Layer, backward() *adds* into the
/// parameter gradients (summed over the batch, never divided by it) and overwrites the input
/// gradient it returns.
///
/// All five support leaf rows (Layer::supports_gradient_leaves; L samples a leaf, so L T token
/// rows): the row-wise kernels (LayerNorm's rows, the patch gather and token assembly,
/// SelectToken) run over all rows, each row's arithmetic its own; the projections through the
/// leaf forms of gemm (each leaf's rows as a call on it alone); the attention (its batched
/// products and the softmax between them) once per leaf, on its samples alone; and every sum
/// over samples or tokens (weights, biases, LayerNorm's weight and bias, the class token and
/// positions) per leaf, then over core/leaf_tree.hpp's tree. With leaves, backward() *writes*
/// the parameter gradients (the model zeroes them first).

#include "hpctrain/core/attention.hpp"
#include "hpctrain/core/tensor.hpp"
#include "hpctrain/models/layer.hpp"

#include <cstdint>

namespace hpctrain::models {

/// [C, H, W] -> [P + 1, D], P = (H / p)(W / p) patches of p x p pixels taken row by row.
///
/// Token 0 is a learned class token; token 1 + i is patch i flattened as [C, p, p] and mapped
/// by weight [D, C p p] and bias [D] (a p x p convolution with stride p). A learned positional
/// embedding [P + 1, D] is added to every token, the class token included.
///
/// Parameters, in order: "weight" [D, C p p] (fan_in_uniform, fan_in = C p p, as PyTorch's
/// Conv2d/Linear), "bias" [D] (zeros), "class_token" [D] and "position" [P + 1, D] (both
/// xavier_uniform with fan_in = fan_out = D: U(-a, a), a = sqrt(3 / D), standard deviation
/// 1 / sqrt(D); small next to the patch projections of unit-scale pixels, yet not zero, so
/// tokens differ from the first step).
/// The constructor throws unless every argument is positive and patch divides height and width.
template <class T>
class PatchEmbedding final : public Layer<T> {
 public:
  PatchEmbedding(std::int64_t channels, std::int64_t height, std::int64_t width,
                 std::int64_t patch, std::int64_t dim);
  std::string kind() const override { return "patch_embedding"; }
  Shape output_shape(const Shape& input_sample_shape) const override;
  std::vector<ParameterSpec> parameter_specs() const override;
  Tensor<T> forward(const Tensor<T>& x, bool train) override;
  Tensor<T> backward(const Tensor<T>& dy, bool need_input_grad) override;
  bool supports_gradient_leaves() const override { return true; }

  std::int64_t patches() const { return (height_ / patch_) * (width_ / patch_); }

 private:
  std::int64_t patch_features() const { return channels_ * patch_ * patch_; }
  std::int64_t channels_, height_, width_, patch_, dim_;
  std::int64_t batch_ = 0;
  Tensor<T> patches_;  ///< [N P, C p p]: the gathered patches (kept for the weight gradient)
  Tensor<T> z_;        ///< [N P, D]: projected patches
  Tensor<T> y_, dz_, dpatches_, dx_;
  Tensor<T> leaf_sums_;  ///< [leaves, P + 1, D]: each leaf's class-token and position sums
};

/// Layer normalisation (Ba et al. 2016) over the last extent: an input of any rank whose last
/// extent is `dim` is treated as rows of `dim` values, and each row becomes
/// y = (x - mean) / sqrt(var + eps) * weight + bias with the biased variance, as PyTorch's
/// LayerNorm(dim, eps). Parameters: "weight" [dim] (ones), "bias" [dim] (zeros).
template <class T>
class LayerNorm final : public Layer<T> {
 public:
  explicit LayerNorm(std::int64_t dim, double eps = 1e-5);
  std::string kind() const override { return "layer_norm"; }
  Shape output_shape(const Shape& input_sample_shape) const override;
  std::vector<ParameterSpec> parameter_specs() const override;
  Tensor<T> forward(const Tensor<T>& x, bool train) override;
  Tensor<T> backward(const Tensor<T>& dy, bool need_input_grad) override;
  bool supports_gradient_leaves() const override { return true; }

 private:
  std::int64_t dim_;
  double eps_;
  Tensor<T> x_, y_, dx_;
  core::Vec<T> mean_, rstd_;  ///< per row, kept for backward
  core::Vec<T> partial_sums_;  ///< [chunks of 64 rows (+ leaves), 2, dim]: dw, db partials in backward
};

/// Multi-head self-attention, [T, D] -> [T, D], as PyTorch's
/// nn.MultiheadAttention(D, heads, batch_first=True) called with query = key = value = x and no
/// mask: [q | k | v] = x W_qkv^T + b_qkv, for each head h (columns h dh .. (h + 1) dh - 1 of
/// q, k, v, dh = D / heads) o_h = softmax(q_h k_h^T / sqrt(dh)) v_h over the keys, and
/// y = [o_1 | ... | o_heads] W_out^T + b_out.
///
/// Parameters, in order: "qkv_weight" [3D, D] (xavier_uniform, fan_in D, fan_out 3D, as
/// PyTorch's in_proj_weight), "qkv_bias" [3D] (zeros), "out_weight" [D, D] (fan_in_uniform),
/// "out_bias" [D] (zeros). The constructor throws unless heads > 0 divides dim.
///
/// Cost per sample: 8 T D^2 flops in the projections and 4 T^2 D in the attention products
/// (forward; backward twice that), the latter as core::attention_forward / attention_backward
/// (batched products over all samples and heads that read q, k, v in place from the
/// projection's output); the attention probabilities
/// [N, heads, T, T] are kept for backward. Buffers are reused while the batch shape repeats.
template <class T>
class MultiHeadSelfAttention final : public Layer<T> {
 public:
  MultiHeadSelfAttention(std::int64_t dim, std::int64_t heads);
  std::string kind() const override { return "multi_head_self_attention"; }
  Shape output_shape(const Shape& input_sample_shape) const override;
  std::vector<ParameterSpec> parameter_specs() const override;
  Tensor<T> forward(const Tensor<T>& x, bool train) override;
  Tensor<T> backward(const Tensor<T>& dy, bool need_input_grad) override;
  bool supports_gradient_leaves() const override { return true; }
  /// The attention's batched matmuls and softmax run leaf by leaf: side by side on the rank's
  /// threads where core::attention_leaves_side_by_side<T>() (float, oneDNN and OpenMP builds),
  /// else one leaf after another.
  bool leaves_one_at_a_time() const override { return !core::attention_leaves_side_by_side<T>(); }

 private:
  std::int64_t dim_, heads_count_;
  std::int64_t batch_ = 0, tokens_ = 0;
  Tensor<T> x_;
  Tensor<T> qkv_;      ///< [3, N T, D]: q, k, v (part-major), head h in columns h dh..
  Tensor<T> attn_;     ///< [N, heads, T, T]: softmax probabilities
  Tensor<T> context_;  ///< [N T, D]: [o_1 | ... | o_heads]
  Tensor<T> y_;
  Tensor<T> dcontext_, dattn_, dqkv_, dx_;  ///< dqkv_ part-major as qkv_
};

/// [..., in] -> [..., out]: the same affine map y = x W^T + b on every token (every row of
/// the last extent), with one gemm over all N T rows; Dense's arithmetic, which shares the
/// code. Parameters: "weight" [out, in] (`init`, fan_in = in, fan_out = out), "bias" [out]
/// (zeros).
template <class T>
class TokenDense final : public Layer<T> {
 public:
  TokenDense(std::int64_t in_features, std::int64_t out_features,
             core::Init init = core::Init::he_normal);
  std::string kind() const override { return "token_dense"; }
  Shape output_shape(const Shape& input_sample_shape) const override;
  std::vector<ParameterSpec> parameter_specs() const override;
  Tensor<T> forward(const Tensor<T>& x, bool train) override;
  Tensor<T> backward(const Tensor<T>& dy, bool need_input_grad) override;
  bool writes_gradients() const override { return true; }
  bool supports_gradient_leaves() const override { return true; }

 private:
  std::int64_t in_, out_;
  core::Init init_;
  Tensor<T> x_, y_, dx_;
};

/// [T, D] -> [D]: token `index` of each sample (the class token for index 0). Backward writes
/// the output gradient into that token and zeros into the others. No parameters.
template <class T>
class SelectToken final : public Layer<T> {
 public:
  explicit SelectToken(std::int64_t index = 0);
  std::string kind() const override { return "select_token"; }
  Shape output_shape(const Shape& input_sample_shape) const override;
  Tensor<T> forward(const Tensor<T>& x, bool train) override;
  Tensor<T> backward(const Tensor<T>& dy, bool need_input_grad) override;
  /// Row-wise copies without parameters: the same at any leaf rows.
  bool supports_gradient_leaves() const override { return true; }

 private:
  std::int64_t index_;
  Shape x_shape_;
  Tensor<T> y_, dx_;
};

}  // namespace hpctrain::models
