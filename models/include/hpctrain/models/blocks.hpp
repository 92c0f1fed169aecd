#pragma once
/// @file
/// The layers residual networks need beside layers.hpp's: batch normalisation, global average
/// pooling and the residual block, a composite layer that keeps `Sequential` a plain chain.

#include "hpctrain/core/batch_norm.hpp"
#include "hpctrain/models/layer.hpp"

#include <memory>
#include <vector>

namespace hpctrain::models {

/// Batch normalisation over the channels of an NCHW tensor (Ioffe & Szegedy 2015), with
/// PyTorch's BatchNorm2d semantics: y = gamma (x - mean) / sqrt(var + eps) + beta.
///
/// Training: mean and (biased) var are the batch's, per channel over N * H * W: this rank's
/// samples, or the global batch's when a StatReducer is set (sync batch norm: one all-reduce in
/// forward, one in backward). Evaluation: the running statistics.
///
/// Parameters: "weight" (gamma, ones), "bias" (beta, zeros), and three non-trainable entries
/// kept in the parameter buffer so checkpoints, broadcasts and inference carry them:
/// "running_mean" (zeros), "running_var" (ones) and "batches_tracked" ([1], zeros: the number of
/// updates, PyTorch's num_batches_tracked). backward() adds this rank's shifted moments into
/// the state's gradient slots (sum of x - running_mean, of its square, and the element count),
/// so the gradient reduction sums them over all ranks and micro-batches with everything else
/// (exactly, under --deterministic); update_state() then sets
///   running_mean <- (1 - m) running_mean + m mean_step,
///   running_var  <- (1 - m) running_var + m var_step * M / (M - 1)   (unbiased, as PyTorch),
/// with mean_step and var_step the statistics of all the step's samples (M elements per channel).
/// So the running statistics are those of the global batch at any rank count, whatever the
/// normalisation in forward used.
///
/// With `relu` the layer is batch norm followed by ReLU, in one pass each way (the same values
/// as a separate ActivationLayer after it, bit for bit).
///
/// Leaf rows L (deterministic training's grouped passes, training only): every leaf of L samples
/// is normalised with its own statistics, as a pass of that leaf alone would be, and each
/// leaf's gradient terms (gamma, beta and the state's moments and count), taken into zeros as
/// such a pass writes them, are added over core/leaf_tree.hpp's tree.
template <class T>
class BatchNorm2D final : public Layer<T> {
 public:
  explicit BatchNorm2D(std::int64_t channels, double momentum = 0.1, double eps = 1e-5, bool relu = false);
  std::string kind() const override { return "batchnorm2d"; }
  Shape output_shape(const Shape& input_sample_shape) const override;
  std::vector<ParameterSpec> parameter_specs() const override;
  Tensor<T> forward(const Tensor<T>& x, bool train) override;
  Tensor<T> backward(const Tensor<T>& dy, bool need_input_grad) override;
  void update_state() override;
  void set_stat_reducer(const StatReducer& reducer) override { reducer_ = reducer; }
  void skip_stat_reductions(bool backward) override;
  /// Without synchronised statistics (which deterministic training refuses).
  bool supports_gradient_leaves() const override { return !reducer_; }

 private:
  using Doubles = Kokkos::View<double*, core::MemSpace>;
  /// Leaf l's part of a per-leaf buffer of `per_leaf` values each.
  static Doubles leaf_part(const Doubles& v, std::int64_t l, std::int64_t per_leaf);
  /// Leaf l's rows of an [N, C, H, W] tensor's data, and their geometry.
  core::Vec<T> leaf_rows(const core::Vec<T>& v, std::int64_t l) const;
  core::ChannelGeometry leaf_geometry(std::int64_t l) const;
  core::ChannelGeometry geometry(const Tensor<T>& x) const;
  /// Every leaf's batch mean and rstd from this rank's moments (reduced over the ranks with a reducer).
  void batch_statistics(const Tensor<T>& x);
  void running_statistics();
  /// The parameter gradients from the backward sums: added as they are (one leaf), or each
  /// leaf's terms into zeros, then over the leaf tree, then added.
  void accumulate_gradients();

  std::int64_t channels_;
  double momentum_, eps_;
  bool relu_;
  StatReducer reducer_;
  core::ChannelGeometry g_;
  bool train_ = false;
  std::int64_t leaf_rows_ = 0, leaves_ = 1;  ///< the last forward's leaves (one: all rows)
  std::vector<double> stat_counts_;  ///< per leaf: elements per channel behind mean_/rstd_ (global with a reducer)
  Doubles moments_, mean_, rstd_, sums_;  ///< per leaf: [2C], [C], [C], [2C]
  core::Vec<T> leaf_terms_;  ///< per leaf: the gradient terms [4C + 1] that backward adds over the tree
  Tensor<T> xhat_, y_, dx_;
};

/// [N, C, H, W] -> [N, C]: the mean over each channel's H x W positions.
template <class T>
class GlobalAvgPool2D final : public Layer<T> {
 public:
  std::string kind() const override { return "globalavgpool2d"; }
  Shape output_shape(const Shape& input_sample_shape) const override;
  Tensor<T> forward(const Tensor<T>& x, bool train) override;
  Tensor<T> backward(const Tensor<T>& dy, bool need_input_grad) override;
  /// Each output row is its own sample's channel means: leaf rows need nothing more.
  bool supports_gradient_leaves() const override { return true; }

 private:
  core::ChannelGeometry g_;
  Shape x_shape_;
  Tensor<T> y_, dx_;
};

/// A residual block: y = main(x) + shortcut(x), each a chain of layers; an empty shortcut is
/// the identity. The block's parameters are its parts' in order (main, then shortcut), named
/// "main.<i>.<kind>.<name>" and "shortcut.<i>.<kind>.<name>". Forward runs main then shortcut;
/// backward runs main's chain then shortcut's (the order any synchronised statistics follow).
/// With `relu` the block's output is max(main(x) + shortcut(x), 0), the sum and the ReLU in one
/// pass (ResNet's basic block).
template <class T>
class Residual final : public Layer<T> {
 public:
  using Chain = std::vector<std::unique_ptr<Layer<T>>>;
  /// Throws unless both chains map `input_sample_shape` to the same output shape.
  Residual(const Shape& input_sample_shape, Chain main, Chain shortcut = {}, bool relu = false);
  std::string kind() const override { return "residual"; }
  Shape output_shape(const Shape& input_sample_shape) const override;
  std::vector<ParameterSpec> parameter_specs() const override;
  Tensor<T> forward(const Tensor<T>& x, bool train) override;
  Tensor<T> backward(const Tensor<T>& dy, bool need_input_grad) override;
  void set_rng_stream(std::uint64_t seed, std::uint64_t layer_index) override;
  void set_rng_position(std::uint64_t step, std::int64_t first_sample) override;
  void update_state() override;
  void set_stat_reducer(const StatReducer& reducer) override;
  void skip_stat_reductions(bool backward) override;
  void unbind_gradients() override;
  /// Leaf rows where every part has them; the sum and its ReLU are row-wise.
  bool supports_gradient_leaves() const override;
  void set_gradient_leaves(std::int64_t rows) override;
  bool leaves_one_at_a_time() const override;

 protected:
  void on_bound() override;

 private:
  /// Every part, main's first: the order of parameters, forward and backward.
  std::vector<Layer<T>*> parts() const;

  Shape input_shape_, output_shape_;
  Chain main_, shortcut_;
  bool relu_;
  Tensor<T> y_, dy_masked_, dx_;
};

}  // namespace hpctrain::models
