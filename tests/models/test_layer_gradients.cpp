// Every layer's backward against float64 central finite differences (see gradient_check.hpp
// for the tolerance argument), each layer inside a one- or two-layer Sequential<double>.
#include "model_gradient_check.hpp"
#include "hpctrain/base/error.hpp"
#include "hpctrain/models/layers.hpp"

#include <gtest/gtest.h>

namespace hpctrain::models {
namespace {

using hpctrain::testing::check_single_layer;
using hpctrain::testing::expect_model_gradients_weighted;
using hpctrain::testing::random_tensor;

template <class L, class... Args>
std::unique_ptr<Layer<double>> make(Args... args) {
  return std::make_unique<L>(args...);
}

TEST(LayerGradients, Dense) { check_single_layer({5}, make<Dense<double>>(5, 4), 3, 100); }

TEST(LayerGradients, Conv2dSamePadding) {
  check_single_layer({2, 5, 5}, make<Conv2D<double>>(2, 3, 3, 1, 1), 2, 110);
}

TEST(LayerGradients, Conv2dStrideTwoNoPadding) {
  check_single_layer({2, 7, 6}, make<Conv2D<double>>(2, 2, 3, 2, 0), 1, 120);
}

TEST(LayerGradients, MaxPool2d) { check_single_layer({2, 5, 4}, make<MaxPool2D<double>>(2), 2, 130); }

TEST(LayerGradients, Relu) {
  check_single_layer({7}, make<ActivationLayer<double>>(Activation::relu), 3, 140);
}

TEST(LayerGradients, Gelu) {
  check_single_layer({7}, make<ActivationLayer<double>>(Activation::gelu), 3, 150);
}

TEST(LayerGradients, FlattenIntoDense) {
  Sequential<double> model({2, 3, 2});
  model.add(std::make_unique<Flatten<double>>()).add(std::make_unique<Dense<double>>(12, 3));
  model.finalize(160);
  EXPECT_EQ(model.output_shape(), (Shape{3}));
  expect_model_gradients_weighted(model, random_tensor<double>("x", {2, 2, 3, 2}, 161), 162);
}

TEST(LayerGradients, DropoutInTraining) {
  Sequential<double> model({6});
  model.add(std::make_unique<Dense<double>>(6, 8)).add(std::make_unique<Dropout<double>>(0.4));
  model.finalize(170);
  model.set_rng_position(3, 40);
  const auto x = random_tensor<double>("x", {4, 6}, 171);
  const auto y = core::to_host(model.forward(x, true).data);
  std::size_t zeros = 0;
  for (double v : y) zeros += v == 0.0;
  EXPECT_GT(zeros, 0u);  // the mask is active...
  EXPECT_LT(zeros, y.size());
  expect_model_gradients_weighted(model, x, 172);  // ...and the same in every FD evaluation
}

TEST(LayerGradients, DropoutIsIdentityInEvaluation) {
  Dropout<double> d(0.5);
  const auto x = random_tensor<double>("x", {3, 4}, 180);
  const auto y = d.forward(x, false);
  EXPECT_EQ(y.data.data(), x.data.data());
  EXPECT_EQ(d.backward(x, true).data.data(), x.data.data());
}

TEST(Layers, RejectIncompatibleShapes) {
  Sequential<float> model({1, 28, 28});
  EXPECT_THROW(model.add(std::make_unique<Dense<float>>(100, 10)), Error);
  EXPECT_THROW(model.add(std::make_unique<Conv2D<float>>(3, 8, 3)), Error);
  EXPECT_THROW(model.add(std::make_unique<MaxPool2D<float>>(29)), Error);
  model.add(std::make_unique<Conv2D<float>>(1, 2, 3));
  EXPECT_EQ(model.output_shape(), (Shape{2, 26, 26}));
  model.finalize(1);
  EXPECT_THROW(model.add(std::make_unique<Flatten<float>>()), Error);
  EXPECT_THROW(model.forward(core::make_tensor<float>("x", {2, 27, 28}), false), Error);
}

}  // namespace
}  // namespace hpctrain::models
