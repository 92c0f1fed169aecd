#include "hpctrain/base/error.hpp"
#include "hpctrain/models/layers.hpp"
#include "row_affine.hpp"

#include <algorithm>

namespace hpctrain::models {

template <class T>
Dense<T>::Dense(std::int64_t in_features, std::int64_t out_features, core::Init init)
    : in_(in_features), out_(out_features), init_(init) {
  HPCTRAIN_REQUIRE(in_ > 0 && out_ > 0, "dense: feature counts must be positive");
}

template <class T>
Shape Dense<T>::output_shape(const Shape& input_sample_shape) const {
  HPCTRAIN_REQUIRE(core::shape_size(input_sample_shape) == in_,
                   "dense(" + std::to_string(in_) + "): cannot take samples of shape " +
                       core::shape_string(input_sample_shape));
  return {out_};
}

template <class T>
std::vector<ParameterSpec> Dense<T>::parameter_specs() const {
  return {{"weight", {out_, in_}, init_, in_, out_}, {"bias", {out_}, core::Init::zeros, in_, out_}};
}

template <class T>
Tensor<T> Dense<T>::forward(const Tensor<T>& x, bool /*train*/) {
  const std::int64_t n = x.dim(0);
  HPCTRAIN_REQUIRE(x.size() == n * in_, "dense: input shape " + core::shape_string(x.shape) +
                                            " has not " + std::to_string(in_) +
                                            " features per sample");
  x_ = x;
  core::ensure_shape(y_, "hpctrain::dense::y", {n, out_});
  // With leaves: each leaf's rows as a batch of them alone gives them.
  detail::row_affine_forward(x.data, n, in_, out_, this->param(0).data, this->param(1).data, y_.data,
                             this->gradient_leaf_rows());
  return y_;
}

template <class T>
Tensor<T> Dense<T>::backward(const Tensor<T>& dy, bool need_input_grad) {
  const std::int64_t n = x_.dim(0);
  HPCTRAIN_REQUIRE(dy.size() == n * out_, "dense: output gradient shape " +
                                              core::shape_string(dy.shape) + " does not match");
  core::Vec<T> dx;
  if (need_input_grad) {
    core::ensure_shape(dx_, "hpctrain::dense::dx", x_.shape);
    dx = dx_.data;
  }
  const bool write = this->take_write_gradients();
  const std::int64_t leaf = this->gradient_leaf_rows();
  // With leaves, even a one-leaf pass takes the leaf path: a leaf's gradient must come from the
  // same kernels in every pass (a rank may hold one micro-shard or eight).
  HPCTRAIN_REQUIRE(leaf <= 0 || write,
                   "dense: gradients over leaves are written, not added (Sequential::begin_gradients first)");
  detail::row_affine_backward(dy.data, x_.data, n, in_, out_, this->param(0).data, this->grad(0).data,
                              this->grad(1).data, dx, write, leaf);
  return need_input_grad ? dx_ : Tensor<T>();
}

template class Dense<float>;
template class Dense<double>;

}  // namespace hpctrain::models
