#pragma once
/// @file
/// A chain of layers whose parameters live in one contiguous buffer and whose gradients live in
/// another, so data-parallel training can all-reduce gradient buckets without copies.

#include "hpctrain/models/layer.hpp"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace hpctrain::models {

/// Where one parameter lies in the model's buffers (registration order = layer order, then
/// the layer's spec order; the gradient has the same offset in the gradient buffer).
struct ParameterInfo {
  std::string name;  ///< "<layer index>.<kind>.<parameter>", e.g. "0.dense.weight"
  std::int64_t offset = 0;
  std::int64_t count = 0;
  Shape shape;
  std::size_t layer = 0;  ///< index of the layer that owns it
  bool trainable = true;  ///< ParameterSpec::trainable
};

/// A sequential model. Build it with add(), then finalize() allocates and initialises the
/// parameters; after that the layer list is fixed.
template <class T>
class Sequential {
 public:
  /// `input_sample_shape` excludes the batch, e.g. {1, 28, 28}.
  explicit Sequential(Shape input_sample_shape);
  Sequential(const Sequential&) = delete;
  Sequential& operator=(const Sequential&) = delete;

  /// Appends a layer; throws if it cannot take the current output shape or after finalize().
  Sequential& add(std::unique_ptr<Layer<T>> layer);
  /// Allocates the parameter and gradient buffers, binds every layer's views into them and
  /// initialises the parameters from `seed`.
  void finalize(std::uint64_t seed);
  bool finalized() const { return finalized_; }

  /// Re-initialises every parameter: element i of parameter p depends only on (seed, p, i).
  void initialize_parameters(std::uint64_t seed);

  /// Runs the batch x[N, input sample shape...] through the layers; returns [N, output...].
  Tensor<T> forward(const Tensor<T>& x, bool train);
  /// Back-propagates dL/d(output), adding into the gradient buffer. Returns dL/dx when
  /// need_input_grad (tests), else an empty tensor (saves the first layer's input gradient).
  /// `on_layer_done(l)`, when given, is called as soon as layer l's parameter gradients are
  /// final (layers run last to first), so data-parallel training can start all-reducing them
  /// while the earlier layers are still back-propagating.
  Tensor<T> backward(const Tensor<T>& dy, bool need_input_grad = false,
                     const std::function<void(std::size_t layer)>& on_layer_done = {});
  /// Called with layer l before layer l's forward, in every forward (training and evaluation)
  /// until replaced; empty: none. ZeRO waits there for the all-gather of the parameters layer l
  /// needs, so the all-gather of later layers overlaps with the forward of earlier ones.
  void set_before_layer_forward(std::function<void(std::size_t layer)> hook) { before_layer_forward_ = std::move(hook); }
  /// Sets the gradient buffer to zero (call once per step, before the first backward).
  void zero_gradients();
  /// Instead of zero_gradients(), before the forward of the step's first batch: the layers that
  /// can (Layer::writes_gradients) write their parameter gradients in the next backward instead
  /// of adding them, and only the other layers' gradients are zeroed now. The bound gradients
  /// (see redirect_gradients) then hold what zeroing and adding would give, up to the sign of
  /// exact zeros, without a pass over the whole buffer.
  void begin_gradients();
  /// Binds every layer's gradient views to `buffer` (parameter_count() elements in the model's
  /// memory space), so that the following forwards and backwards add their parameter gradients
  /// (and batch norm its statistics) there instead of into gradient_buffer(); an empty Vec binds
  /// them back to gradient_buffer(). Deterministic training computes each micro-shard's
  /// gradient straight into the tree sum's storage this way (no copy out of the model's buffer).
  void redirect_gradients(const core::Vec<T>& buffer);
  /// Inference only: frees the gradient buffer (the layers forget their views into it), so a
  /// forward-only model holds its parameters alone. backward() then throws; irreversible.
  void release_gradients();
  bool has_gradients() const { return grads_.extent(0) > 0 || params_.extent(0) == 0; }
  /// Whether every layer supports leaf rows (Layer::supports_gradient_leaves): deterministic
  /// training can then run a node of micro-shards as one pass.
  bool supports_gradient_leaves() const;
  /// Whether a layer runs its leaves one at a time on a held library (Layer::leaves_one_at_a_time).
  bool leaves_one_at_a_time() const;
  /// Leaf rows for every layer (0: off). With L > 0 a forward and backward over any rows give
  /// the bits of L-row passes' outputs, and parameter gradients that are the L-row leaves'
  /// separate gradients summed over core/leaf_tree.hpp's tree (written: begin_gradients first).
  /// Throws where a layer does not support it.
  void set_gradient_leaves(std::int64_t rows);
  /// Where dropout draws from: the training step and the global index of the first sample of
  /// this rank's part of the batch.
  void set_rng_position(std::uint64_t step, std::int64_t first_sample);

  /// Whether some layer keeps non-trainable state in the parameter buffer (batch norm).
  bool has_state() const;
  /// After the step's gradients are summed over all ranks and before clipping and the
  /// optimiser: every layer turns its state's gradient slots into new state (Layer::update_state).
  void update_state();
  /// 1 for every trainable element of the parameter buffer, 0 for the state entries (its size):
  /// the trainer hands it to the optimiser (Optimizer::set_trainable_mask), so weight decay
  /// and momentum leave the state alone.
  core::Vec<T> trainable_mask() const;
  /// Synchronised batch statistics through `reducer` (empty: each rank's own batch).
  void set_stat_reducer(const StatReducer& reducer);
  /// For a rank with no samples in a batch: the stat reductions forward and backward would make.
  void skip_stat_reductions();

  const core::Vec<T>& parameter_buffer() const { return params_; }
  const core::Vec<T>& gradient_buffer() const { return grads_; }
  const std::vector<ParameterInfo>& parameter_info() const { return info_; }
  /// Entries of the parameter buffer; before finalize(), what it will allocate.
  std::int64_t parameter_count() const {
    return finalized_ ? static_cast<std::int64_t>(params_.extent(0)) : planned_parameter_count();
  }
  /// Views into the buffers, named as in parameter_info().
  std::vector<NamedTensor<T>> parameters() const { return named_views(params_); }
  std::vector<NamedTensor<T>> gradients() const { return named_views(grads_); }

  const Shape& input_shape() const { return input_shape_; }
  const Shape& output_shape() const { return output_shape_; }
  std::size_t layer_count() const { return layers_.size(); }
  Layer<T>& layer(std::size_t i) { return *layers_.at(i); }
  /// One line per layer: index, kind, output shape, parameter count.
  std::string summary() const;

 private:
  std::int64_t planned_parameter_count() const;
  std::vector<NamedTensor<T>> named_views(const core::Vec<T>& buffer) const;
  /// Binds layer l's parameter views into params_ and its gradient views into `grads`.
  void bind_layers(const core::Vec<T>& grads);

  Shape input_shape_;
  Shape output_shape_;
  std::vector<std::unique_ptr<Layer<T>>> layers_;
  std::vector<Shape> layer_outputs_;
  std::vector<ParameterInfo> info_;
  std::vector<ParameterSpec> specs_;
  core::Vec<T> params_;
  core::Vec<T> grads_;
  core::Vec<T> bound_grads_;  ///< where the layers' gradient views point: grads_ or a redirect
  bool finalized_ = false;
  std::function<void(std::size_t)> before_layer_forward_;
};

}  // namespace hpctrain::models
