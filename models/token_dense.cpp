#include "hpctrain/base/error.hpp"
#include "hpctrain/models/transformer_layers.hpp"
#include "row_affine.hpp"

namespace hpctrain::models {

template <class T>
TokenDense<T>::TokenDense(std::int64_t in_features, std::int64_t out_features, core::Init init)
    : in_(in_features), out_(out_features), init_(init) {
  HPCTRAIN_REQUIRE(in_ > 0 && out_ > 0, "token_dense: feature counts must be positive");
}

template <class T>
Shape TokenDense<T>::output_shape(const Shape& s) const {
  HPCTRAIN_REQUIRE(!s.empty() && s.back() == in_,
                   "token_dense(" + std::to_string(in_) + "): samples must end in an extent of " +
                       std::to_string(in_) + ", got " + core::shape_string(s));
  Shape out = s;
  out.back() = out_;
  return out;
}

template <class T>
std::vector<ParameterSpec> TokenDense<T>::parameter_specs() const {
  return {{"weight", {out_, in_}, init_, in_, out_}, {"bias", {out_}, core::Init::zeros, in_, out_}};
}

template <class T>
Tensor<T> TokenDense<T>::forward(const Tensor<T>& x, bool /*train*/) {
  HPCTRAIN_REQUIRE(x.rank() >= 2 && x.dim(-1) == in_,
                   "token_dense: input shape " + core::shape_string(x.shape) + " does not end in " +
                       std::to_string(in_));
  x_ = x;
  const std::int64_t rows = x.size() / in_;
  Shape out = x.shape;
  out.back() = out_;
  core::ensure_shape(y_, "hpctrain::token_dense::y", out);
  detail::row_affine_forward(x.data, rows, in_, out_, this->param(0).data, this->param(1).data,
                             y_.data, this->gradient_leaf_rows_of(x_, in_));
  return y_;
}

template <class T>
Tensor<T> TokenDense<T>::backward(const Tensor<T>& dy, bool need_input_grad) {
  const std::int64_t rows = x_.size() / in_;
  HPCTRAIN_REQUIRE(dy.size() == rows * out_, "token_dense: output gradient shape " +
                                                 core::shape_string(dy.shape) + " does not match");
  core::Vec<T> dx;
  if (need_input_grad) {
    core::ensure_shape(dx_, "hpctrain::token_dense::dx", x_.shape);
    dx = dx_.data;
  }
  // With leaves the gradients are written, whether or not the model asked (inside a Residual
  // it does not, and zeroes them instead).
  detail::row_affine_backward(dy.data, x_.data, rows, in_, out_, this->param(0).data,
                              this->grad(0).data, this->grad(1).data, dx, this->take_write_gradients(),
                              this->gradient_leaf_rows_of(x_, in_));
  return need_input_grad ? dx_ : Tensor<T>();
}

template class TokenDense<float>;
template class TokenDense<double>;

}  // namespace hpctrain::models
