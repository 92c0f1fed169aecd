#include "hpctrain/base/error.hpp"
#include "hpctrain/core/gemm.hpp"
#include "hpctrain/models/layers.hpp"

namespace hpctrain::models {

using core::as_matrix;
using core::Trans;

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
  const core::Matrix<T> y = as_matrix(y_.data, n, out_);
  core::linear_forward(as_matrix(x.data, n, in_), as_matrix(this->param(0).data, out_, in_),
                       this->param(1).data, y);
  return y_;
}

template <class T>
Tensor<T> Dense<T>::backward(const Tensor<T>& dy, bool need_input_grad) {
  const std::int64_t n = x_.dim(0);
  HPCTRAIN_REQUIRE(dy.size() == n * out_, "dense: output gradient shape " +
                                              core::shape_string(dy.shape) + " does not match");
  const core::Matrix<T> dym = as_matrix(dy.data, n, out_);
  core::gemm(Trans::yes, Trans::no, T(1), dym, as_matrix(x_.data, n, in_), T(1),
             as_matrix(this->grad(0).data, out_, in_));
  core::accumulate_column_sums(dym, this->grad(1).data);
  if (!need_input_grad) return {};
  core::ensure_shape(dx_, "hpctrain::dense::dx", x_.shape);
  core::gemm(Trans::no, Trans::no, T(1), dym, as_matrix(this->param(0).data, out_, in_), T(0),
             as_matrix(dx_.data, n, in_));
  return dx_;
}

template class Dense<float>;
template class Dense<double>;

}  // namespace hpctrain::models
