#pragma once
/// @file
/// The concrete layers: Dense, Conv2D, MaxPool2D, ReLU, GELU, Flatten, Dropout.

#include "hpctrain/core/conv.hpp"
#include "hpctrain/core/elementwise.hpp"
#include "hpctrain/models/layer.hpp"

namespace hpctrain::models {

/// y[N, out] = x[N, in] W^T + b; W is [out, in] (He-normal by default), b is [out] (zeros).
template <class T>
class Dense final : public Layer<T> {
 public:
  Dense(std::int64_t in_features, std::int64_t out_features,
        core::Init init = core::Init::he_normal);
  std::string kind() const override { return "dense"; }
  Shape output_shape(const Shape& input_sample_shape) const override;
  std::vector<ParameterSpec> parameter_specs() const override;
  Tensor<T> forward(const Tensor<T>& x, bool train) override;
  Tensor<T> backward(const Tensor<T>& dy, bool need_input_grad) override;
  bool writes_gradients() const override { return true; }
  /// With leaf rows L: forward and the input gradient leaf by leaf (the same products as on
  /// L-row batches), the weight and bias gradients as core::gemm_tn_leaf_tree and
  /// core::column_sums_leaf_tree give them.
  bool supports_gradient_leaves() const override { return true; }

 private:
  std::int64_t in_, out_;
  core::Init init_;
  Tensor<T> x_, y_, dx_;
};

/// NCHW convolution with square kernels, stride and zero padding; W is [F, C, K, K].
template <class T>
class Conv2D final : public Layer<T> {
 public:
  Conv2D(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel,
         std::int64_t stride = 1, std::int64_t pad = 0, core::Init init = core::Init::he_normal);
  std::string kind() const override { return "conv2d"; }
  Shape output_shape(const Shape& input_sample_shape) const override;
  std::vector<ParameterSpec> parameter_specs() const override;
  Tensor<T> forward(const Tensor<T>& x, bool train) override;
  Tensor<T> backward(const Tensor<T>& dy, bool need_input_grad) override;
  /// Leaf rows: each leaf runs as a batch of its own (core::conv2d_forward_in_leaves).
  bool supports_gradient_leaves() const override { return true; }

 private:
  core::Conv2dGeometry geometry(const Tensor<T>& x) const;
  std::int64_t in_c_, out_c_, k_, stride_, pad_;
  core::Init init_;
  core::Conv2dGeometry g_;
  core::Conv2dWorkspace<T> ws_;
  core::Conv2dLeaves<T> leaves_;
  std::int64_t forward_leaf_rows_ = 0;  ///< the last forward's leaf rows (0: one batch)
  Tensor<T> y_, dx_;
};

/// Max-pooling over kernel x kernel windows with a stride (no padding; the remainder is dropped).
template <class T>
class MaxPool2D final : public Layer<T> {
 public:
  explicit MaxPool2D(std::int64_t kernel = 2, std::int64_t stride = 0);  ///< stride 0 = kernel
  std::string kind() const override { return "maxpool2d"; }
  Shape output_shape(const Shape& input_sample_shape) const override;
  Tensor<T> forward(const Tensor<T>& x, bool train) override;
  Tensor<T> backward(const Tensor<T>& dy, bool need_input_grad) override;
  /// Each sample's windows alone give its outputs; with disjoint windows (stride >= kernel) each
  /// input gradient has one writer, so the bits do not depend on the batch or its order.
  bool supports_gradient_leaves() const override { return stride_ >= k_; }

 private:
  std::int64_t k_, stride_;
  core::Pool2dGeometry g_;
  Shape x_shape_;
  Kokkos::View<std::int64_t*, core::MemSpace> argmax_;
  Tensor<T> y_, dx_;
};

enum class Activation { relu, gelu };
Activation parse_activation(const std::string& name);  ///< "relu", "gelu"

/// Element-wise activation (ReLU, or GELU with the tanh approximation).
template <class T>
class ActivationLayer final : public Layer<T> {
 public:
  explicit ActivationLayer(Activation activation);
  std::string kind() const override { return activation_ == Activation::relu ? "relu" : "gelu"; }
  Shape output_shape(const Shape& input_sample_shape) const override { return input_sample_shape; }
  /// ReLU: a select per element, at any length. GELU may run on oneDNN's kernels, whose bits
  /// for an element are not documented to be independent of the tensor's length: with leaf rows
  /// it runs one call per leaf (the calls a pass per leaf makes).
  bool supports_gradient_leaves() const override { return true; }
  Tensor<T> forward(const Tensor<T>& x, bool train) override;
  Tensor<T> backward(const Tensor<T>& dy, bool need_input_grad) override;

 private:
  Activation activation_;
  Tensor<T> x_, y_, dx_;
};

/// [N, d1, d2, ...] -> [N, d1 * d2 * ...] without copying.
template <class T>
class Flatten final : public Layer<T> {
 public:
  std::string kind() const override { return "flatten"; }
  Shape output_shape(const Shape& input_sample_shape) const override;
  bool supports_gradient_leaves() const override { return true; }
  Tensor<T> forward(const Tensor<T>& x, bool train) override;
  Tensor<T> backward(const Tensor<T>& dy, bool need_input_grad) override;

 private:
  Shape x_shape_;
};

/// Inverted dropout: in training, zeroes each element with probability `rate` and scales the
/// rest by 1 / (1 - rate); identity in evaluation. The mask comes from the counter-based RNG
/// keyed by (seed, layer index, step, global sample index, element), so it is the same for any
/// rank count; the model sets step and first sample with set_rng_position().
template <class T>
class Dropout final : public Layer<T> {
 public:
  explicit Dropout(double rate);
  std::string kind() const override { return "dropout"; }
  Shape output_shape(const Shape& input_sample_shape) const override { return input_sample_shape; }
  /// Each element's mask is keyed by its global sample index: row by row.
  bool supports_gradient_leaves() const override { return true; }
  Tensor<T> forward(const Tensor<T>& x, bool train) override;
  Tensor<T> backward(const Tensor<T>& dy, bool need_input_grad) override;
  void set_rng_stream(std::uint64_t seed, std::uint64_t layer_index) override;
  void set_rng_position(std::uint64_t step, std::int64_t first_sample) override;

 private:
  double rate_;
  core::DropoutKey key_;
  bool last_train_ = false;
  Tensor<T> y_, dx_;
};

}  // namespace hpctrain::models
