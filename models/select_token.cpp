#include "hpctrain/base/error.hpp"
#include "hpctrain/models/transformer_layers.hpp"

namespace hpctrain::models {

namespace {
using Range = Kokkos::RangePolicy<core::ExecSpace>;
}  // namespace

template <class T>
SelectToken<T>::SelectToken(std::int64_t index) : index_(index) {
  HPCTRAIN_REQUIRE(index_ >= 0, "select_token: the token index must be >= 0");
}

template <class T>
Shape SelectToken<T>::output_shape(const Shape& s) const {
  HPCTRAIN_REQUIRE(s.size() == 2 && s[0] > index_,
                   "select_token(" + std::to_string(index_) +
                       "): samples must be [tokens, dim] with more than " +
                       std::to_string(index_) + " tokens, got " + core::shape_string(s));
  return {s[1]};
}

template <class T>
Tensor<T> SelectToken<T>::forward(const Tensor<T>& x, bool /*train*/) {
  HPCTRAIN_REQUIRE(x.rank() == 3 && x.dim(1) > index_,
                   "select_token: input must be [N, tokens > " + std::to_string(index_) +
                       ", dim], got " + core::shape_string(x.shape));
  x_shape_ = x.shape;
  const std::int64_t n = x.dim(0), tokens = x.dim(1), dim = x.dim(2), index = index_;
  core::ensure_shape(y_, "hpctrain::select_token::y", {n, dim});
  const core::Vec<T> xs = x.data, ys = y_.data;
  Kokkos::parallel_for(
      "hpctrain::select_token::forward", Range(0, n * dim), KOKKOS_LAMBDA(const std::int64_t i) {
        const std::int64_t s = i / dim, d = i % dim;
        ys(i) = xs((s * tokens + index) * dim + d);
      });
  return y_;
}

template <class T>
Tensor<T> SelectToken<T>::backward(const Tensor<T>& dy, bool need_input_grad) {
  if (!need_input_grad) return {};
  const std::int64_t n = x_shape_.at(0), tokens = x_shape_.at(1), dim = x_shape_.at(2);
  HPCTRAIN_REQUIRE(dy.size() == n * dim, "select_token: output gradient shape " +
                                             core::shape_string(dy.shape) + " does not match");
  core::ensure_shape(dx_, "hpctrain::select_token::dx", x_shape_);
  const std::int64_t index = index_;
  const core::Vec<T> dys = dy.data, dxs = dx_.data;
  Kokkos::parallel_for(
      "hpctrain::select_token::backward", Range(0, n * tokens),
      KOKKOS_LAMBDA(const std::int64_t row) {  // one thread per token
        const std::int64_t s = row / tokens, t = row % tokens;
        for (std::int64_t d = 0; d < dim; ++d) {
          dxs(row * dim + d) = t == index ? dys(s * dim + d) : T(0);
        }
      });
  return dx_;
}

template class SelectToken<float>;
template class SelectToken<double>;

}  // namespace hpctrain::models
