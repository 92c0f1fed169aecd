// The LayerNorm layer; its kernels are the compute core's (core/layer_norm.hpp).
#include "hpctrain/base/error.hpp"
#include "hpctrain/core/layer_norm.hpp"
#include "hpctrain/models/transformer_layers.hpp"

namespace hpctrain::models {

template <class T>
LayerNorm<T>::LayerNorm(std::int64_t dim, double eps) : dim_(dim), eps_(eps) {
  HPCTRAIN_REQUIRE(dim_ > 0 && eps_ >= 0.0, "layer_norm: dim must be positive and eps >= 0");
}

template <class T>
Shape LayerNorm<T>::output_shape(const Shape& s) const {
  HPCTRAIN_REQUIRE(!s.empty() && s.back() == dim_,
                   "layer_norm(" + std::to_string(dim_) + "): samples must end in an extent of " +
                       std::to_string(dim_) + ", got " + core::shape_string(s));
  return s;
}

template <class T>
std::vector<ParameterSpec> LayerNorm<T>::parameter_specs() const {
  return {{"weight", {dim_}, core::Init::ones, dim_, dim_},
          {"bias", {dim_}, core::Init::zeros, dim_, dim_}};
}

template <class T>
Tensor<T> LayerNorm<T>::forward(const Tensor<T>& x, bool /*train*/) {
  HPCTRAIN_REQUIRE(x.rank() >= 2 && x.dim(-1) == dim_,
                   "layer_norm: input shape " + core::shape_string(x.shape) + " does not end in " +
                       std::to_string(dim_));
  x_ = x;
  const std::int64_t rows = x.size() / dim_;
  core::ensure_shape(y_, "hpctrain::layer_norm::y", x.shape);
  if (static_cast<std::int64_t>(mean_.extent(0)) != rows) {
    mean_ = core::Vec<T>("hpctrain::layer_norm::mean", static_cast<std::size_t>(rows));
    rstd_ = core::Vec<T>("hpctrain::layer_norm::rstd", static_cast<std::size_t>(rows));
  }
  core::layer_norm_forward(x.data, rows, dim_, static_cast<T>(eps_), this->param(0).data,
                 this->param(1).data, mean_, rstd_, y_.data);
  return y_;
}

template <class T>
Tensor<T> LayerNorm<T>::backward(const Tensor<T>& dy, bool need_input_grad) {
  const std::int64_t rows = x_.size() / dim_;
  HPCTRAIN_REQUIRE(dy.size() == x_.size(), "layer_norm: output gradient shape " +
                                               core::shape_string(dy.shape) + " does not match");
  const std::int64_t leaf = this->gradient_leaf_rows_of(x_, dim_);
  const auto partial_size = static_cast<std::size_t>(
      leaf > 0 ? core::layer_norm_leaf_tree_workspace(rows, dim_, leaf) : core::layer_norm_partial_rows(rows) * 2 * dim_);
  if (partial_sums_.extent(0) != partial_size) {
    partial_sums_ = core::Vec<T>("hpctrain::layer_norm::partial_parameter_sums", partial_size);
  }
  if (leaf > 0) {  // the leaves' sums over the tree, written
    core::layer_norm_parameter_gradients_leaf_tree(x_.data, dy.data, rows, dim_, leaf, mean_, rstd_, partial_sums_,
                                                   this->grad(0).data, this->grad(1).data);
  } else {
    core::layer_norm_parameter_gradients(x_.data, dy.data, rows, dim_, mean_, rstd_, partial_sums_,
                                         this->grad(0).data, this->grad(1).data);
  }
  if (!need_input_grad) return {};
  core::ensure_shape(dx_, "hpctrain::layer_norm::dx", x_.shape);
  core::layer_norm_backward_input(x_.data, dy.data, rows, dim_, this->param(0).data, mean_, rstd_,
                          dx_.data);
  return dx_;
}

template class LayerNorm<float>;
template class LayerNorm<double>;

}  // namespace hpctrain::models
