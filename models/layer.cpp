#include "hpctrain/models/layer.hpp"

#include "hpctrain/base/error.hpp"

namespace hpctrain::models {

template <class T>
void Layer<T>::bind(std::vector<Tensor<T>> params, std::vector<Tensor<T>> grads) {
  const std::vector<ParameterSpec> specs = parameter_specs();
  HPCTRAIN_REQUIRE(params.size() == specs.size() && grads.size() == specs.size(),
                   kind() + ": bind got " + std::to_string(params.size()) +
                       " parameters for " + std::to_string(specs.size()) + " specs");
  for (std::size_t i = 0; i < specs.size(); ++i) {
    HPCTRAIN_REQUIRE(params[i].shape == specs[i].shape && grads[i].shape == specs[i].shape,
                     kind() + ": parameter '" + specs[i].name + "' bound with shape " +
                         core::shape_string(params[i].shape) + ", expected " +
                         core::shape_string(specs[i].shape));
  }
  params_ = std::move(params);
  grads_ = std::move(grads);
  on_bound();
}

template <class T>
std::vector<NamedTensor<T>> Layer<T>::named(const std::vector<Tensor<T>>& tensors) const {
  const std::vector<ParameterSpec> specs = parameter_specs();
  std::vector<NamedTensor<T>> out;
  for (std::size_t i = 0; i < tensors.size(); ++i) out.push_back({specs[i].name, tensors[i]});
  return out;
}

template class Layer<float>;
template class Layer<double>;

}  // namespace hpctrain::models
