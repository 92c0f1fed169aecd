#include "hpctrain/base/error.hpp"
#include "hpctrain/core/elementwise.hpp"
#include "hpctrain/models/blocks.hpp"

#include <algorithm>

namespace hpctrain::models {

namespace {

template <class T>
Shape chain_output(const std::vector<std::unique_ptr<Layer<T>>>& chain, Shape shape) {
  for (const auto& layer : chain) {
    HPCTRAIN_REQUIRE(layer != nullptr, "residual: a part is null");
    shape = layer->output_shape(shape);
  }
  return shape;
}

}  // namespace

template <class T>
Residual<T>::Residual(const Shape& input_sample_shape, Chain main, Chain shortcut, bool relu)
    : input_shape_(input_sample_shape), main_(std::move(main)), shortcut_(std::move(shortcut)), relu_(relu) {
  HPCTRAIN_REQUIRE(!main_.empty(), "residual: the main path needs at least one layer");
  output_shape_ = chain_output(main_, input_shape_);
  const Shape skip = chain_output(shortcut_, input_shape_);
  HPCTRAIN_REQUIRE(skip == output_shape_, "residual: the main path gives " + core::shape_string(output_shape_) +
                                              " but the shortcut gives " + core::shape_string(skip) +
                                              " (a shortcut that changes the shape needs its own layers)");
}

template <class T>
Shape Residual<T>::output_shape(const Shape& s) const {
  HPCTRAIN_REQUIRE(s == input_shape_, "residual: built for samples of shape " + core::shape_string(input_shape_) +
                                          ", given " + core::shape_string(s));
  return output_shape_;
}

template <class T>
std::vector<Layer<T>*> Residual<T>::parts() const {
  std::vector<Layer<T>*> out;
  for (const auto& l : main_) out.push_back(l.get());
  for (const auto& l : shortcut_) out.push_back(l.get());
  return out;
}

template <class T>
std::vector<ParameterSpec> Residual<T>::parameter_specs() const {
  std::vector<ParameterSpec> specs;
  const auto add_chain = [&](const Chain& chain, const std::string& path) {
    for (std::size_t i = 0; i < chain.size(); ++i) {
      for (ParameterSpec spec : chain[i]->parameter_specs()) {
        spec.name = path + "." + std::to_string(i) + "." + chain[i]->kind() + "." + spec.name;
        specs.push_back(std::move(spec));
      }
    }
  };
  add_chain(main_, "main");
  add_chain(shortcut_, "shortcut");
  return specs;
}

template <class T>
void Residual<T>::on_bound() {
  std::size_t next = 0;
  for (Layer<T>* part : parts()) {
    std::vector<Tensor<T>> p, g;
    const std::size_t n = part->parameter_specs().size();
    for (std::size_t i = 0; i < n; ++i, ++next) {
      p.push_back(this->param(next));
      g.push_back(this->grad(next));
    }
    part->bind(std::move(p), std::move(g));
  }
}

template <class T>
void Residual<T>::unbind_gradients() {
  Layer<T>::unbind_gradients();
  for (Layer<T>* part : parts()) part->unbind_gradients();
}

template <class T>
bool Residual<T>::supports_gradient_leaves() const {
  const std::vector<Layer<T>*> all = parts();
  return std::all_of(all.begin(), all.end(), [](const Layer<T>* part) { return part->supports_gradient_leaves(); });
}

template <class T>
bool Residual<T>::leaves_one_at_a_time() const {
  const std::vector<Layer<T>*> all = parts();
  return std::any_of(all.begin(), all.end(), [](const Layer<T>* part) { return part->leaves_one_at_a_time(); });
}

template <class T>
void Residual<T>::set_gradient_leaves(std::int64_t rows) {
  HPCTRAIN_REQUIRE(rows == 0 || supports_gradient_leaves(),
                   "residual: a part cannot sum its gradients over leaves");
  Layer<T>::set_gradient_leaves(rows);
  for (Layer<T>* part : parts()) part->set_gradient_leaves(rows);
}

template <class T>
Tensor<T> Residual<T>::forward(const Tensor<T>& x, bool train) {
  Tensor<T> h = x;
  for (auto& layer : main_) h = layer->forward(h, train);
  Tensor<T> s = x;
  for (auto& layer : shortcut_) s = layer->forward(s, train);
  core::ensure_shape(y_, "hpctrain::residual::y", h.shape);
  HPCTRAIN_REQUIRE(h.size() == s.size(), "residual: the two paths produced tensors of different sizes");
  core::add(h.data, s.data, relu_, y_.data);
  return y_;
}

template <class T>
Tensor<T> Residual<T>::backward(const Tensor<T>& dy, bool need_input_grad) {
  Tensor<T> masked = dy;
  if (relu_) {
    core::ensure_shape(dy_masked_, "hpctrain::residual::dy_masked", dy.shape);
    core::relu_backward(y_.data, dy.data, dy_masked_.data);
    masked = dy_masked_;
  }
  Tensor<T> g = masked;
  for (std::size_t l = main_.size(); l-- > 0;) g = main_[l]->backward(g, l > 0 || need_input_grad);
  Tensor<T> gs = masked;
  for (std::size_t l = shortcut_.size(); l-- > 0;) gs = shortcut_[l]->backward(gs, l > 0 || need_input_grad);
  if (!need_input_grad) return {};
  core::ensure_shape(dx_, "hpctrain::residual::dx", g.shape);
  core::add(g.data, gs.data, false, dx_.data);
  return dx_;
}

template <class T>
void Residual<T>::set_rng_stream(std::uint64_t seed, std::uint64_t layer_index) {
  // Each part gets its own stream: (block index, part index) packed so no two layers share one.
  const std::vector<Layer<T>*> all = parts();
  for (std::size_t i = 0; i < all.size(); ++i) all[i]->set_rng_stream(seed, (layer_index + 1) << 16 | i);
}

template <class T>
void Residual<T>::set_rng_position(std::uint64_t step, std::int64_t first_sample) {
  for (Layer<T>* part : parts()) part->set_rng_position(step, first_sample);
}

template <class T>
void Residual<T>::update_state() {
  for (Layer<T>* part : parts()) part->update_state();
}

template <class T>
void Residual<T>::set_stat_reducer(const StatReducer& reducer) {
  for (Layer<T>* part : parts()) part->set_stat_reducer(reducer);
}

template <class T>
void Residual<T>::skip_stat_reductions(bool backward) {
  if (!backward) {
    for (Layer<T>* part : parts()) part->skip_stat_reductions(false);
    return;
  }
  for (std::size_t l = main_.size(); l-- > 0;) main_[l]->skip_stat_reductions(true);
  for (std::size_t l = shortcut_.size(); l-- > 0;) shortcut_[l]->skip_stat_reductions(true);
}

template class Residual<float>;
template class Residual<double>;

}  // namespace hpctrain::models
