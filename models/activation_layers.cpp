#include "hpctrain/base/error.hpp"
#include "hpctrain/core/counter_rng.hpp"
#include "hpctrain/models/layers.hpp"

namespace hpctrain::models {

Activation parse_activation(const std::string& name) {
  if (name == "relu") return Activation::relu;
  if (name == "gelu") return Activation::gelu;
  HPCTRAIN_FAIL("unknown activation '" + name + "' (expected relu or gelu)");
}

template <class T>
ActivationLayer<T>::ActivationLayer(Activation activation) : activation_(activation) {}

namespace {
/// The elements per leaf of `x`'s rows in leaves of `leaf_rows` rows (core::gelu_*_in_leaves),
/// 0 (one call) without leaves.
template <class T>
std::int64_t leaf_elements(std::int64_t leaf_rows, const Tensor<T>& x) {
  const std::int64_t rows = x.rank() == 0 ? 0 : x.dim(0);
  return leaf_rows <= 0 || rows == 0 ? 0 : leaf_rows * (x.size() / rows);
}
}  // namespace

template <class T>
Tensor<T> ActivationLayer<T>::forward(const Tensor<T>& x, bool /*train*/) {
  x_ = x;
  core::ensure_shape(y_, "hpctrain::activation::y", x.shape);
  if (activation_ == Activation::relu) {
    core::relu_forward(x.data, y_.data);
  } else {
    core::gelu_forward_in_leaves(leaf_elements(this->gradient_leaf_rows(), x), x.data, y_.data);
  }
  return y_;
}

template <class T>
Tensor<T> ActivationLayer<T>::backward(const Tensor<T>& dy, bool need_input_grad) {
  if (!need_input_grad) return {};
  core::ensure_shape(dx_, "hpctrain::activation::dx", x_.shape);
  if (activation_ == Activation::relu) {
    core::relu_backward(y_.data, dy.data, dx_.data);
  } else {
    core::gelu_backward_in_leaves(leaf_elements(this->gradient_leaf_rows(), x_), x_.data, dy.data, dx_.data);
  }
  return dx_;
}

template <class T>
Shape Flatten<T>::output_shape(const Shape& input_sample_shape) const {
  return {core::shape_size(input_sample_shape)};
}

template <class T>
Tensor<T> Flatten<T>::forward(const Tensor<T>& x, bool /*train*/) {
  x_shape_ = x.shape;
  const std::int64_t n = x.dim(0);
  return x.reshaped({n, n == 0 ? 0 : x.size() / n});
}

template <class T>
Tensor<T> Flatten<T>::backward(const Tensor<T>& dy, bool need_input_grad) {
  if (!need_input_grad) return {};
  return dy.reshaped(x_shape_);
}

template <class T>
Dropout<T>::Dropout(double rate) : rate_(rate) {
  HPCTRAIN_REQUIRE(rate >= 0.0 && rate < 1.0, "dropout rate must be in [0, 1)");
}

template <class T>
void Dropout<T>::set_rng_stream(std::uint64_t seed, std::uint64_t layer_index) {
  // A domain tag keeps dropout streams apart from parameter-initialisation hashes.
  constexpr std::uint64_t kDropoutDomain = 0xD2A0'0000'0000'0001ull;
  key_.stream = core::counter_hash(seed, layer_index, kDropoutDomain);
}

template <class T>
void Dropout<T>::set_rng_position(std::uint64_t step, std::int64_t first_sample) {
  key_.step = step;
  key_.first_sample = first_sample;
}

template <class T>
Tensor<T> Dropout<T>::forward(const Tensor<T>& x, bool train) {
  last_train_ = train && rate_ > 0.0 && x.size() > 0;
  if (!last_train_) return x;
  core::ensure_shape(y_, "hpctrain::dropout::y", x.shape);
  core::dropout_apply(key_, rate_, x.size() / x.dim(0), x.data, y_.data);
  return y_;
}

template <class T>
Tensor<T> Dropout<T>::backward(const Tensor<T>& dy, bool need_input_grad) {
  if (!need_input_grad) return {};
  if (!last_train_) return dy;
  core::ensure_shape(dx_, "hpctrain::dropout::dx", dy.shape);
  core::dropout_apply(key_, rate_, dy.size() / dy.dim(0), dy.data, dx_.data);
  return dx_;
}

template class ActivationLayer<float>;
template class ActivationLayer<double>;
template class Flatten<float>;
template class Flatten<double>;
template class Dropout<float>;
template class Dropout<double>;

}  // namespace hpctrain::models
