#pragma once
/// @file
/// The Layer interface: forward and backward on a batch, parameters as named tensors.

#include "hpctrain/core/init.hpp"
#include "hpctrain/core/tensor.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace hpctrain::models {

using core::NamedTensor;
using core::Shape;
using core::Tensor;

/// What a layer needs of one parameter: the model allocates it in its contiguous buffer.
struct ParameterSpec {
  std::string name;  ///< "weight", "bias"
  Shape shape;
  core::Init init = core::Init::zeros;
  std::int64_t fan_in = 1;
  std::int64_t fan_out = 1;
  /// false for state a layer keeps in the parameter buffer without training it (batch norm's
  /// running statistics): the optimiser leaves it alone, gradient checks skip it, and the layer
  /// updates it itself in update_state() from what its backward() left in the gradient slot.
  bool trainable = true;
};

/// Sums `count` doubles in place over the ranks that share a batch (synchronised batch norm);
/// every rank calls it with the same counts in the same order. Set on a model by the trainer.
using StatReducer = std::function<void(double* values, std::size_t count)>;

/// One layer. Tensors carry the batch as their first extent; "sample shapes" leave it out.
///
/// forward() returns a tensor the layer owns and overwrites on its next forward(); backward()
/// must follow the forward() of the same batch, *adds* parameter gradients into the bound
/// gradient tensors, and returns the input gradient (empty when need_input_grad is false).
template <class T>
class Layer {
 public:
  virtual ~Layer() = default;
  Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  /// Short kind name: "dense", "conv2d", "relu", ...
  virtual std::string kind() const = 0;
  /// Output sample shape for an input sample shape; throws if the layer cannot take it.
  virtual Shape output_shape(const Shape& input_sample_shape) const = 0;
  virtual std::vector<ParameterSpec> parameter_specs() const { return {}; }
  virtual Tensor<T> forward(const Tensor<T>& x, bool train) = 0;
  virtual Tensor<T> backward(const Tensor<T>& dy, bool need_input_grad) = 0;
  /// Where dropout-like layers draw random numbers; no-op for deterministic layers.
  virtual void set_rng_stream(std::uint64_t /*seed*/, std::uint64_t /*layer_index*/) {}
  virtual void set_rng_position(std::uint64_t /*step*/, std::int64_t /*first_sample*/) {}

  /// Layers with non-trainable state (batch norm): after the step's gradients are summed over
  /// all ranks, turns what backward() accumulated in the state's gradient slots into the new
  /// state, and zeroes those slots so the optimiser and clipping see no gradient there.
  virtual void update_state() {}
  /// Synchronised statistics: the layer reduces its batch statistics with `reducer` (empty: local).
  virtual void set_stat_reducer(const StatReducer& /*reducer*/) {}
  /// A rank with no samples in a batch makes the reductions forward() (backward: false) or
  /// backward() (true) would have made, with zeros, so the ranks that have samples do not wait.
  virtual void skip_stat_reductions(bool /*backward*/) {}

  /// Whether backward() can write its parameter gradients instead of adding them, when told to
  /// by set_write_gradients (Sequential::begin_gradients): the model then need not zero them.
  virtual bool writes_gradients() const { return false; }
  /// The next backward() writes (true) its parameter gradients instead of adding them; only for
  /// a layer whose writes_gradients() is true. That backward resets it.
  void set_write_gradients(bool on) { write_gradients_ = on; }

  /// Deterministic training's grouped passes (Sequential::set_gradient_leaves). True where, told
  /// leaf rows L > 0, forward() and backward() on a batch of any rows give every row's output and
  /// input gradient the bits they have in L-row batches, and the parameter gradients (written, as
  /// after set_write_gradients) the bits of the batch's L-row leaves' separate gradients added
  /// over core/leaf_tree.hpp's pairwise tree. Row-wise layers without parameters (ReLU, flatten,
  /// dropout) are so at any L; batch norm normalises each leaf with its own statistics (as a pass
  /// of that leaf alone); a layer without such kernels is not.
  virtual bool supports_gradient_leaves() const { return false; }
  /// Whether, with leaf rows, the layer still runs its leaves one after another on a library
  /// deterministic training holds at one thread (oneDNN), so a rank's other threads idle there:
  /// the start-up then says that one rank per core is faster.
  virtual bool leaves_one_at_a_time() const { return false; }
  /// Sets L (0: off, the default; the layer then sums over all rows as it always has).
  /// Composite layers (Residual) hand it on to their parts.
  virtual void set_gradient_leaves(std::int64_t rows) { leaf_rows_ = rows; }

  /// Called by the model: views for the parameters and gradients, in spec order (again when
  /// the model binds the gradients elsewhere: Sequential::redirect_gradients).
  void bind(std::vector<Tensor<T>> params, std::vector<Tensor<T>> grads);
  /// Forgets the gradient views (inference: Sequential::release_gradients); backward then throws.
  virtual void unbind_gradients() { grads_.clear(); }
  /// The bound parameters / gradients, named by spec ("weight", "bias").
  std::vector<NamedTensor<T>> parameters() const { return named(params_); }
  std::vector<NamedTensor<T>> gradients() const { return named(grads_); }

 protected:
  /// After bind() has stored the views (composite layers hand them on to their parts).
  virtual void on_bound() {}
  const Tensor<T>& param(std::size_t i) const { return params_.at(i); }
  const Tensor<T>& grad(std::size_t i) const { return grads_.at(i); }
  /// For backward(): whether to write rather than add the parameter gradients this time.
  bool take_write_gradients() { return std::exchange(write_gradients_, false); }
  /// The leaf rows set_gradient_leaves() set (0: off).
  std::int64_t gradient_leaf_rows() const { return leaf_rows_; }
  /// The same leaves in rows of `width` values of the batch `x` (a layer that maps every token
  /// of a sample as a row of its own): the leaf samples times such rows per sample; 0 when off.
  std::int64_t gradient_leaf_rows_of(const Tensor<T>& x, std::int64_t width) const {
    const std::int64_t samples = x.rank() > 0 ? x.dim(0) : 0;
    return samples > 0 ? leaf_rows_ * (x.size() / width / samples) : 0;
  }

 private:
  std::vector<NamedTensor<T>> named(const std::vector<Tensor<T>>& tensors) const;

  std::vector<Tensor<T>> params_;
  std::vector<Tensor<T>> grads_;
  bool write_gradients_ = false;
  std::int64_t leaf_rows_ = 0;
};

}  // namespace hpctrain::models
