#pragma once
// Finite-difference checks of a whole Sequential<double>: every parameter and the input.
#include "gradient_check.hpp"
#include "hpctrain/core/loss.hpp"
#include "hpctrain/models/sequential.hpp"

namespace hpctrain::testing {

/// Checks dL/dx and dL/dparameters of `model` where L is `loss_of(output)` and `dloss` writes
/// dL/doutput. Checks every `stride`-th element of each parameter.
inline void expect_model_gradients(models::Sequential<double>& model,
                                   const core::Tensor<double>& x,
                                   const std::function<double(const core::Tensor<double>&)>& loss_of,
                                   const std::function<core::Tensor<double>(const core::Tensor<double>&)>& dloss,
                                   std::size_t stride = 1) {
  const core::Tensor<double> y = model.forward(x, true);
  const core::Tensor<double> dy = dloss(y);
  model.zero_gradients();
  const std::vector<double> dx = core::to_host(model.backward(dy, true).data);
  const std::vector<double> grads = core::to_host(model.gradient_buffer());
  const auto loss = [&] { return loss_of(model.forward(x, true)); };
  expect_gradient_matches("input", x.data, dx, loss);
  for (const auto& info : model.parameter_info()) {
    if (!info.trainable) continue;  // state (batch norm's running statistics): no gradient
    const std::vector<double> analytic(grads.begin() + info.offset,
                                       grads.begin() + info.offset + info.count);
    const auto range = std::make_pair(info.offset, info.offset + info.count);
    expect_gradient_matches(info.name, Kokkos::subview(model.parameter_buffer(), range), analytic,
                            loss, 1e-6, 1e-6, stride);
  }
}

/// L = sum_i r_i y_i with fixed random r: every output element gets a distinct weight.
inline void expect_model_gradients_weighted(models::Sequential<double>& model,
                                            const core::Tensor<double>& x, std::uint32_t seed) {
  const core::Shape out_shape = model.forward(x, true).shape;
  const auto r = random_values<double>(static_cast<std::size_t>(core::shape_size(out_shape)), seed);
  const auto r_tensor = core::tensor_from_host<double>("r", out_shape, r);
  expect_model_gradients(
      model, x, [&](const core::Tensor<double>& y) { return weighted_sum(y, r); },
      [&](const core::Tensor<double>&) { return r_tensor; });
}

/// Checks one layer alone in a Sequential<double> on a batch of `batch` samples of `sample`:
/// every parameter (set to random values in [-1, 1], so zero-initialised biases and unit scales
/// count too) and the input, against central differences.
inline void check_single_layer(core::Shape sample, std::unique_ptr<models::Layer<double>> layer,
                               std::int64_t batch, std::uint32_t seed) {
  models::Sequential<double> model(sample);
  model.add(std::move(layer));
  model.finalize(seed);
  core::Shape x_shape{batch};
  x_shape.insert(x_shape.end(), sample.begin(), sample.end());
  const auto params = random_tensor<double>("p", {model.parameter_count()}, seed + 1);
  Kokkos::deep_copy(model.parameter_buffer(), params.data);
  const auto x = random_tensor<double>("x", x_shape, seed + 2);
  expect_model_gradients_weighted(model, x, seed + 3);
}

}  // namespace hpctrain::testing
