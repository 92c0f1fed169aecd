#include "hpctrain/base/error.hpp"
#include "hpctrain/models/layers.hpp"

namespace hpctrain::models {

template <class T>
Conv2D<T>::Conv2D(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel,
                  std::int64_t stride, std::int64_t pad, core::Init init)
    : in_c_(in_channels), out_c_(out_channels), k_(kernel), stride_(stride), pad_(pad),
      init_(init) {
  HPCTRAIN_REQUIRE(in_c_ > 0 && out_c_ > 0 && k_ > 0 && stride_ > 0 && pad_ >= 0,
                   "conv2d: channels, kernel and stride must be positive, padding >= 0");
}

template <class T>
core::Conv2dGeometry Conv2D<T>::geometry(const Tensor<T>& x) const {
  HPCTRAIN_REQUIRE(x.rank() == 4 && x.dim(1) == in_c_,
                   "conv2d(" + std::to_string(in_c_) + " channels): input must be [N, " +
                       std::to_string(in_c_) + ", H, W], got " + core::shape_string(x.shape));
  core::Conv2dGeometry g;
  g.batch = x.dim(0);
  g.in_channels = in_c_;
  g.height = x.dim(2);
  g.width = x.dim(3);
  g.out_channels = out_c_;
  g.kernel = k_;
  g.stride = stride_;
  g.pad = pad_;
  g.validate();
  return g;
}

template <class T>
Shape Conv2D<T>::output_shape(const Shape& s) const {
  HPCTRAIN_REQUIRE(s.size() == 3, "conv2d: sample shape must be [C, H, W], got " +
                                      core::shape_string(s));
  const core::Conv2dGeometry g =
      geometry(Tensor<T>(core::Vec<T>(), Shape{0, s[0], s[1], s[2]}));
  return {out_c_, g.out_height(), g.out_width()};
}

template <class T>
std::vector<ParameterSpec> Conv2D<T>::parameter_specs() const {
  const std::int64_t fan_in = in_c_ * k_ * k_, fan_out = out_c_ * k_ * k_;
  return {{"weight", {out_c_, in_c_, k_, k_}, init_, fan_in, fan_out},
          {"bias", {out_c_}, core::Init::zeros, fan_in, fan_out}};
}

template <class T>
Tensor<T> Conv2D<T>::forward(const Tensor<T>& x, bool /*train*/) {
  g_ = geometry(x);
  core::ensure_shape(y_, "hpctrain::conv2d::y", {g_.batch, out_c_, g_.out_height(), g_.out_width()});
  forward_leaf_rows_ = this->gradient_leaf_rows();
  if (forward_leaf_rows_ > 0) {
    core::conv2d_forward_in_leaves(forward_leaf_rows_, g_, x.data, this->param(0).data, this->param(1).data, leaves_,
                                   y_.data);
  } else {
    core::conv2d_forward(g_, x.data, this->param(0).data, this->param(1).data, ws_, y_.data);
  }
  return y_;
}

template <class T>
Tensor<T> Conv2D<T>::backward(const Tensor<T>& dy, bool need_input_grad) {
  HPCTRAIN_REQUIRE(dy.size() == g_.batch * out_c_ * g_.out_height() * g_.out_width(),
                   "conv2d: output gradient shape " + core::shape_string(dy.shape) +
                       " does not match the forward output");
  core::Vec<T> dx;
  if (need_input_grad) {
    core::ensure_shape(dx_, "hpctrain::conv2d::dx", {g_.batch, in_c_, g_.height, g_.width});
    dx = dx_.data;
  }
  if (forward_leaf_rows_ > 0) {
    core::conv2d_backward_in_leaves(forward_leaf_rows_, g_, this->param(0).data, dy.data, leaves_,
                                    this->grad(0).data, this->grad(1).data, dx);
  } else {
    core::conv2d_backward(g_, this->param(0).data, dy.data, ws_, this->grad(0).data, this->grad(1).data, dx);
  }
  return need_input_grad ? dx_ : Tensor<T>();
}

template <class T>
MaxPool2D<T>::MaxPool2D(std::int64_t kernel, std::int64_t stride)
    : k_(kernel), stride_(stride == 0 ? kernel : stride) {
  HPCTRAIN_REQUIRE(k_ > 0 && stride_ > 0, "maxpool2d: kernel and stride must be positive");
}

template <class T>
Shape MaxPool2D<T>::output_shape(const Shape& s) const {
  HPCTRAIN_REQUIRE(s.size() == 3 && s[1] >= k_ && s[2] >= k_,
                   "maxpool2d(" + std::to_string(k_) + "): sample shape must be [C, H, W] with "
                   "H, W >= window, got " + core::shape_string(s));
  return {s[0], (s[1] - k_) / stride_ + 1, (s[2] - k_) / stride_ + 1};
}

template <class T>
Tensor<T> MaxPool2D<T>::forward(const Tensor<T>& x, bool /*train*/) {
  HPCTRAIN_REQUIRE(x.rank() == 4, "maxpool2d: input must be [N, C, H, W], got " +
                                      core::shape_string(x.shape));
  g_.batch = x.dim(0);
  g_.channels = x.dim(1);
  g_.height = x.dim(2);
  g_.width = x.dim(3);
  g_.kernel = k_;
  g_.stride = stride_;
  g_.validate();
  x_shape_ = x.shape;
  const Shape out{g_.batch, g_.channels, g_.out_height(), g_.out_width()};
  core::ensure_shape(y_, "hpctrain::maxpool2d::y", out);
  if (static_cast<std::int64_t>(argmax_.extent(0)) != y_.size()) {
    argmax_ = Kokkos::View<std::int64_t*, core::MemSpace>("hpctrain::maxpool2d::argmax",
                                                          static_cast<std::size_t>(y_.size()));
  }
  core::maxpool2d_forward(g_, x.data, y_.data, argmax_);
  return y_;
}

template <class T>
Tensor<T> MaxPool2D<T>::backward(const Tensor<T>& dy, bool need_input_grad) {
  if (!need_input_grad) return {};
  core::ensure_shape(dx_, "hpctrain::maxpool2d::dx", x_shape_);
  core::maxpool2d_backward(g_, dy.data, argmax_, dx_.data);
  return dx_;
}

template class Conv2D<float>;
template class Conv2D<double>;
template class MaxPool2D<float>;
template class MaxPool2D<double>;

}  // namespace hpctrain::models
