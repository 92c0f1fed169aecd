#include "hpctrain/models/sequential.hpp"

#include "hpctrain/base/error.hpp"
#include "hpctrain/core/elementwise.hpp"

#include <algorithm>
#include <sstream>

namespace hpctrain::models {

template <class T>
Sequential<T>::Sequential(Shape input_sample_shape)
    : input_shape_(std::move(input_sample_shape)), output_shape_(input_shape_) {
  HPCTRAIN_REQUIRE(!input_shape_.empty() && core::shape_size(input_shape_) > 0,
                   "model input shape must be non-empty, got " + core::shape_string(input_shape_));
}

template <class T>
Sequential<T>& Sequential<T>::add(std::unique_ptr<Layer<T>> layer) {
  HPCTRAIN_REQUIRE(!finalized_, "cannot add layers to a finalized model");
  HPCTRAIN_REQUIRE(layer != nullptr, "cannot add a null layer");
  output_shape_ = layer->output_shape(output_shape_);
  layer_outputs_.push_back(output_shape_);
  layers_.push_back(std::move(layer));
  return *this;
}

template <class T>
std::int64_t Sequential<T>::planned_parameter_count() const {
  std::int64_t total = 0;
  for (const auto& layer : layers_) {
    for (const ParameterSpec& spec : layer->parameter_specs()) total += core::shape_size(spec.shape);
  }
  return total;
}

template <class T>
void Sequential<T>::finalize(std::uint64_t seed) {
  HPCTRAIN_REQUIRE(!finalized_, "model finalized twice");
  HPCTRAIN_REQUIRE(!layers_.empty(), "a model needs at least one layer");
  std::int64_t total = 0;
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    for (const ParameterSpec& spec : layers_[l]->parameter_specs()) {
      const std::int64_t count = core::shape_size(spec.shape);
      info_.push_back({std::to_string(l) + "." + layers_[l]->kind() + "." + spec.name, total,
                       count, spec.shape, l, spec.trainable});
      specs_.push_back(spec);
      total += count;
    }
  }
  params_ = core::Vec<T>("hpctrain::model::parameters", static_cast<std::size_t>(total));
  grads_ = core::Vec<T>("hpctrain::model::gradients", static_cast<std::size_t>(total));
  bind_layers(grads_);
  for (std::size_t l = 0; l < layers_.size(); ++l) layers_[l]->set_rng_stream(seed, l);
  finalized_ = true;
  initialize_parameters(seed);
}

template <class T>
void Sequential<T>::bind_layers(const core::Vec<T>& grads) {
  bound_grads_ = grads;
  std::size_t next = 0;
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    std::vector<Tensor<T>> p, g;
    for (std::size_t i = 0; i < layers_[l]->parameter_specs().size(); ++i, ++next) {
      const ParameterInfo& info = info_[next];
      const auto range = std::make_pair(info.offset, info.offset + info.count);
      p.emplace_back(Kokkos::subview(params_, range), info.shape);
      g.emplace_back(Kokkos::subview(grads, range), info.shape);
    }
    layers_[l]->bind(std::move(p), std::move(g));
  }
}

template <class T>
void Sequential<T>::redirect_gradients(const core::Vec<T>& buffer) {
  HPCTRAIN_REQUIRE(finalized_, "redirect_gradients before finalize");
  HPCTRAIN_REQUIRE(has_gradients(), "redirect_gradients on a model whose gradients were released (inference only)");
  const core::Vec<T>& target = buffer.extent(0) == 0 ? grads_ : buffer;
  HPCTRAIN_REQUIRE(target.extent(0) == params_.extent(0),
                   "redirect_gradients: a buffer of " + std::to_string(buffer.extent(0)) + " elements for " +
                       std::to_string(params_.extent(0)) + " parameters");
  if (target.data() != bound_grads_.data()) bind_layers(target);  // rebinding allocates views: only when it moves
}

template <class T>
void Sequential<T>::initialize_parameters(std::uint64_t seed) {
  HPCTRAIN_REQUIRE(finalized_, "initialize_parameters before finalize");
  for (std::size_t p = 0; p < info_.size(); ++p) {
    const auto range = std::make_pair(info_[p].offset, info_[p].offset + info_[p].count);
    core::initialize<T>(Kokkos::subview(params_, range), specs_[p].init, specs_[p].fan_in,
                        specs_[p].fan_out, seed, p);
  }
  for (std::size_t l = 0; l < layers_.size(); ++l) layers_[l]->set_rng_stream(seed, l);
}

template <class T>
Tensor<T> Sequential<T>::forward(const Tensor<T>& x, bool train) {
  HPCTRAIN_REQUIRE(finalized_, "forward before finalize");
  HPCTRAIN_REQUIRE(x.rank() >= 1, "model input needs a batch dimension");
  const std::int64_t n = x.dim(0);
  const std::int64_t per_sample = core::shape_size(input_shape_);
  HPCTRAIN_REQUIRE(x.size() == n * per_sample,
                   "model input " + core::shape_string(x.shape) + " is not a batch of " +
                       core::shape_string(input_shape_));
  Shape batched{n};
  batched.insert(batched.end(), input_shape_.begin(), input_shape_.end());
  Tensor<T> h = x.reshaped(batched);
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    if (before_layer_forward_) before_layer_forward_(l);
    h = layers_[l]->forward(h, train);
  }
  return h;
}

template <class T>
Tensor<T> Sequential<T>::backward(const Tensor<T>& dy, bool need_input_grad,
                                  const std::function<void(std::size_t)>& on_layer_done) {
  HPCTRAIN_REQUIRE(finalized_, "backward before finalize");
  HPCTRAIN_REQUIRE(has_gradients(), "backward on a model whose gradients were released (inference only)");
  // The input gradient of the first layer with parameters feeds only parameterless layers (a
  // flatten, say): unless the caller wants the model's input gradient, it and everything below
  // it is skipped (for the MLP, whose first layer is a flatten, the 128x512x784 product that
  // would give the pixels' gradient).
  const std::size_t first_trained = info_.empty() ? layers_.size() : info_.front().layer;
  Tensor<T> g = dy;
  for (std::size_t l = layers_.size(); l-- > 0;) {
    if (need_input_grad || l >= first_trained) g = layers_[l]->backward(g, need_input_grad || l > first_trained);
    if (on_layer_done) on_layer_done(l);
  }
  return need_input_grad ? g : Tensor<T>();
}

template <class T>
void Sequential<T>::zero_gradients() {
  core::set_zero(grads_);
}

template <class T>
void Sequential<T>::begin_gradients() {
  HPCTRAIN_REQUIRE(has_gradients(), "begin_gradients on a model whose gradients were released (inference only)");
  // info_ lists the parameters layer by layer, each layer's contiguous in the buffer.
  for (std::size_t first = 0; first < info_.size();) {
    const std::size_t l = info_[first].layer;
    std::size_t end = first;
    while (end < info_.size() && info_[end].layer == l) ++end;
    if (layers_[l]->writes_gradients()) {
      layers_[l]->set_write_gradients(true);
    } else {
      const auto range = std::make_pair(info_[first].offset, info_[end - 1].offset + info_[end - 1].count);
      core::set_zero(core::Vec<T>(Kokkos::subview(bound_grads_, range)));
    }
    first = end;
  }
}

template <class T>
bool Sequential<T>::supports_gradient_leaves() const {
  return std::all_of(layers_.begin(), layers_.end(), [](const auto& layer) { return layer->supports_gradient_leaves(); });
}

template <class T>
bool Sequential<T>::leaves_one_at_a_time() const {
  return std::any_of(layers_.begin(), layers_.end(), [](const auto& layer) { return layer->leaves_one_at_a_time(); });
}

template <class T>
void Sequential<T>::set_gradient_leaves(std::int64_t rows) {
  HPCTRAIN_REQUIRE(rows >= 0, "set_gradient_leaves: " + std::to_string(rows) + " rows per leaf");
  for (auto& layer : layers_) {
    HPCTRAIN_REQUIRE(rows == 0 || layer->supports_gradient_leaves(),
                     "set_gradient_leaves: a " + layer->kind() + " layer cannot sum its gradients over leaves");
    layer->set_gradient_leaves(rows);
  }
}

template <class T>
void Sequential<T>::release_gradients() {
  for (auto& layer : layers_) layer->unbind_gradients();
  grads_ = core::Vec<T>();
  bound_grads_ = core::Vec<T>();
}

template <class T>
void Sequential<T>::set_rng_position(std::uint64_t step, std::int64_t first_sample) {
  for (auto& layer : layers_) layer->set_rng_position(step, first_sample);
}

template <class T>
bool Sequential<T>::has_state() const {
  for (const ParameterInfo& info : info_) {
    if (!info.trainable) return true;
  }
  return false;
}

template <class T>
void Sequential<T>::update_state() {
  for (auto& layer : layers_) layer->update_state();
}

template <class T>
core::Vec<T> Sequential<T>::trainable_mask() const {
  std::vector<T> mask(static_cast<std::size_t>(params_.extent(0)), T(1));
  for (const ParameterInfo& info : info_) {
    if (!info.trainable) std::fill_n(mask.begin() + info.offset, info.count, T(0));
  }
  core::Vec<T> out("hpctrain::Sequential::trainable_mask", mask.size());
  core::from_host(out, mask);
  return out;
}

template <class T>
void Sequential<T>::set_stat_reducer(const StatReducer& reducer) {
  for (auto& layer : layers_) layer->set_stat_reducer(reducer);
}

template <class T>
void Sequential<T>::skip_stat_reductions() {
  for (auto& layer : layers_) layer->skip_stat_reductions(false);
  for (std::size_t l = layers_.size(); l-- > 0;) layers_[l]->skip_stat_reductions(true);
}

template <class T>
std::vector<NamedTensor<T>> Sequential<T>::named_views(const core::Vec<T>& buffer) const {
  std::vector<NamedTensor<T>> out;
  for (const ParameterInfo& info : info_) {
    const auto range = std::make_pair(info.offset, info.offset + info.count);
    out.push_back({info.name, Tensor<T>(Kokkos::subview(buffer, range), info.shape)});
  }
  return out;
}

template <class T>
std::string Sequential<T>::summary() const {
  std::ostringstream out;
  out << "input " << core::shape_string(input_shape_) << '\n';
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    std::int64_t count = 0;
    for (const ParameterSpec& spec : layers_[l]->parameter_specs()) {
      count += core::shape_size(spec.shape);
    }
    out << l << ' ' << layers_[l]->kind() << " -> " << core::shape_string(layer_outputs_[l])
        << "  params " << count << '\n';
  }
  out << "total params " << parameter_count() << '\n';
  return out.str();
}

template class Sequential<float>;
template class Sequential<double>;

}  // namespace hpctrain::models
