// Batch norm, global average pooling, the residual block and the resnet model: backward
// against float64 central finite differences, forward and the running statistics against
// plain host loops written here.
#include "model_gradient_check.hpp"
#include "hpctrain/base/error.hpp"
#include "hpctrain/models/blocks.hpp"
#include "hpctrain/models/layers.hpp"
#include "hpctrain/models/registry.hpp"

#include <gtest/gtest.h>

#include <cmath>

namespace hpctrain::models {
namespace {

using hpctrain::testing::expect_model_gradients_weighted;
using hpctrain::testing::random_tensor;
using hpctrain::testing::random_values;

/// Random trainable parameters (so a weight or bias that is ignored shows); state entries get
/// valid values: running_var positive.
void randomise(Sequential<double>& model, std::uint32_t seed) {
  std::vector<double> p = random_values<double>(static_cast<std::size_t>(model.parameter_count()), seed);
  for (const auto& info : model.parameter_info()) {
    if (info.name.find("running_var") != std::string::npos) {
      for (std::int64_t i = 0; i < info.count; ++i) p[info.offset + i] = 0.5 + std::fabs(p[info.offset + i]);
    }
  }
  core::from_host(model.parameter_buffer(), p);
}

void check_model(Sequential<double>& model, std::int64_t batch, std::uint32_t seed) {
  model.finalize(seed);
  randomise(model, seed + 1);
  Shape x_shape{batch};
  x_shape.insert(x_shape.end(), model.input_shape().begin(), model.input_shape().end());
  const auto x = random_tensor<double>("x", x_shape, seed + 2);
  expect_model_gradients_weighted(model, x, seed + 3);
}

TEST(BlockGradients, BatchNormInTraining) {
  for (const std::int64_t batch : {1, 3}) {
    Sequential<double> model({3, 2, 5});
    model.add(std::make_unique<BatchNorm2D<double>>(3));
    check_model(model, batch, 200 + static_cast<std::uint32_t>(batch));
  }
}

TEST(BlockGradients, BatchNormAfterConvWithOneChannel) {
  Sequential<double> model({2, 4, 3});
  model.add(std::make_unique<Conv2D<double>>(2, 1, 3, 1, 1));
  model.add(std::make_unique<BatchNorm2D<double>>(1));
  check_model(model, 7, 210);
}

TEST(BlockGradients, BatchNormWithFusedRelu) {
  Sequential<double> model({3, 3, 4});
  model.add(std::make_unique<BatchNorm2D<double>>(3, 0.1, 1e-5, /*relu=*/true));
  check_model(model, 3, 205);
}

TEST(BlockGradients, ResidualWithFusedRelu) {
  const Shape in{2, 4, 3};
  Residual<double>::Chain main;
  main.push_back(std::make_unique<Conv2D<double>>(2, 2, 3, 1, 1));
  main.push_back(std::make_unique<BatchNorm2D<double>>(2));
  Sequential<double> model(in);
  model.add(std::make_unique<Residual<double>>(in, std::move(main), Residual<double>::Chain{}, /*relu=*/true));
  check_model(model, 3, 235);
}

/// The fused ReLUs give the bits of a separate ReLU layer, forward and backward.
TEST(Blocks, FusedReluIsBitForBitASeparateRelu) {
  const Shape in{3, 4, 5};
  const auto build = [&](bool fused) {
    auto m = std::make_unique<Sequential<float>>(in);
    Residual<float>::Chain main;
    main.push_back(std::make_unique<Conv2D<float>>(3, 3, 3, 1, 1));
    main.push_back(std::make_unique<BatchNorm2D<float>>(3, 0.1, 1e-5, fused));
    if (!fused) main.push_back(std::make_unique<ActivationLayer<float>>(Activation::relu));
    main.push_back(std::make_unique<Conv2D<float>>(3, 3, 3, 1, 1));
    m->add(std::make_unique<Residual<float>>(in, std::move(main), Residual<float>::Chain{}, fused));
    if (!fused) m->add(std::make_unique<ActivationLayer<float>>(Activation::relu));
    m->finalize(5);
    return m;
  };
  auto fused = build(true), separate = build(false);
  ASSERT_EQ(fused->parameter_count(), separate->parameter_count());
  const auto x = random_tensor<float>("x", {4, 3, 4, 5}, 17);
  const auto y1 = core::to_host(fused->forward(x, true).data);
  const auto y2 = core::to_host(separate->forward(x, true).data);
  EXPECT_EQ(y1, y2);
  const auto dy = random_tensor<float>("dy", {4, 3, 4, 5}, 18);
  fused->zero_gradients();
  separate->zero_gradients();
  EXPECT_EQ(core::to_host(fused->backward(dy, true).data), core::to_host(separate->backward(dy, true).data));
  EXPECT_EQ(core::to_host(fused->gradient_buffer()), core::to_host(separate->gradient_buffer()));
}

TEST(BlockGradients, GlobalAvgPool) {
  Sequential<double> model({3, 4, 5});
  model.add(std::make_unique<GlobalAvgPool2D<double>>());
  check_model(model, 3, 220);
}

TEST(BlockGradients, ResidualIdentityShortcut) {
  const Shape in{2, 5, 4};
  Residual<double>::Chain main;
  main.push_back(std::make_unique<Conv2D<double>>(2, 2, 3, 1, 1));
  main.push_back(std::make_unique<BatchNorm2D<double>>(2));
  main.push_back(std::make_unique<ActivationLayer<double>>(Activation::gelu));
  Sequential<double> model(in);
  model.add(std::make_unique<Residual<double>>(in, std::move(main)));
  check_model(model, 3, 230);
}

TEST(BlockGradients, ResidualProjectionShortcutWithStride) {
  const Shape in{2, 5, 6};
  Residual<double>::Chain main, shortcut;
  main.push_back(std::make_unique<Conv2D<double>>(2, 3, 3, 2, 1));
  main.push_back(std::make_unique<BatchNorm2D<double>>(3));
  shortcut.push_back(std::make_unique<Conv2D<double>>(2, 3, 1, 2, 0));
  shortcut.push_back(std::make_unique<BatchNorm2D<double>>(3));
  Sequential<double> model(in);
  model.add(std::make_unique<Residual<double>>(in, std::move(main), std::move(shortcut)));
  model.add(std::make_unique<GlobalAvgPool2D<double>>());
  check_model(model, 3, 240);
}

TEST(BlockGradients, ResnetEndToEnd) {
  auto model = build_model<double>(
      {{"name", "resnet"}, {"input_shape", {1, 6, 5}}, {"channels", {2, 3}}, {"blocks", 2}, {"classes", 3}});
  randomise(*model, 250);
  const auto x = random_tensor<double>("x", {3, 1, 6, 5}, 251);
  expect_model_gradients_weighted(*model, x, 252);
}

/// Forward in training, evaluation with given running statistics, and update_state against
/// loops over a host copy.
TEST(BatchNorm, ForwardAndRunningStatisticsMatchAHostReference) {
  const std::int64_t n = 3, c = 2, hw = 6;
  Sequential<double> model({c, 2, 3});
  model.add(std::make_unique<BatchNorm2D<double>>(c, 0.25, 1e-5));
  model.finalize(1);
  std::vector<double> p = {1.5, -0.5, 0.25, 2.0, /*running_mean*/ 0.5, -1.0, /*running_var*/ 2.0, 0.5, /*tracked*/ 0};
  core::from_host(model.parameter_buffer(), p);
  auto xs = random_values<double>(static_cast<std::size_t>(n * c * hw), 7, -2.0, 3.0);
  for (double& v : xs) v += 10.0;  // |mean| >> std: the shifted moments must not cancel
  const auto x = core::tensor_from_host<double>("x", {n, c, 2, 3}, xs);
  const std::vector<double> y = core::to_host(model.forward(x, true).data);
  std::vector<double> mean(c, 0.0), var(c, 0.0);
  const double m = static_cast<double>(n * hw);
  for (std::int64_t k = 0; k < n; ++k)
    for (std::int64_t ch = 0; ch < c; ++ch)
      for (std::int64_t i = 0; i < hw; ++i) mean[ch] += xs[(k * c + ch) * hw + i] / m;
  for (std::int64_t k = 0; k < n; ++k)
    for (std::int64_t ch = 0; ch < c; ++ch)
      for (std::int64_t i = 0; i < hw; ++i) var[ch] += std::pow(xs[(k * c + ch) * hw + i] - mean[ch], 2) / m;
  for (std::int64_t k = 0; k < n; ++k)
    for (std::int64_t ch = 0; ch < c; ++ch)
      for (std::int64_t i = 0; i < hw; ++i) {
        const std::size_t e = static_cast<std::size_t>((k * c + ch) * hw + i);
        const double want = p[ch] * (xs[e] - mean[ch]) / std::sqrt(var[ch] + 1e-5) + p[2 + ch];
        EXPECT_NEAR(y[e], want, 1e-10) << "element " << e;
      }
  // Backward leaves the moments in the state's slots; update_state turns them into statistics.
  model.zero_gradients();
  model.backward(core::tensor_from_host<double>("dy", {n, c, 2, 3}, std::vector<double>(xs.size(), 0.0)));
  model.update_state();
  const std::vector<double> after = core::to_host(model.parameter_buffer());
  for (std::int64_t ch = 0; ch < c; ++ch) {
    EXPECT_NEAR(after[4 + ch], 0.75 * p[4 + ch] + 0.25 * mean[ch], 1e-12);
    EXPECT_NEAR(after[6 + ch], 0.75 * p[6 + ch] + 0.25 * var[ch] * m / (m - 1), 1e-12);
  }
  EXPECT_EQ(after[8], 1.0);
  const std::vector<double> grads = core::to_host(model.gradient_buffer());
  for (std::size_t i = 4; i < grads.size(); ++i) EXPECT_EQ(grads[i], 0.0) << "state slot " << i << " not consumed";
  // Evaluation normalises with the running statistics.
  const std::vector<double> ye = core::to_host(model.forward(x, false).data);
  for (std::int64_t k = 0; k < n; ++k)
    for (std::int64_t ch = 0; ch < c; ++ch)
      for (std::int64_t i = 0; i < hw; ++i) {
        const std::size_t e = static_cast<std::size_t>((k * c + ch) * hw + i);
        const double want = p[ch] * (xs[e] - after[4 + ch]) / std::sqrt(after[6 + ch] + 1e-5) + p[2 + ch];
        EXPECT_NEAR(ye[e], want, 1e-10) << "element " << e;
      }
}

TEST(BatchNorm, StateIsNotTrainedAndTheMaskSaysWhere) {
  auto model = build_model<float>({{"name", "resnet"}, {"channels", {4}}, {"input_shape", {1, 8, 8}}});
  ASSERT_TRUE(model->has_state());
  std::int64_t state = 0;
  for (const auto& info : model->parameter_info()) {
    if (!info.trainable) {
      state += info.count;
      EXPECT_TRUE(info.name.find("running_") != std::string::npos || info.name.find("batches_tracked") != std::string::npos)
          << info.name;
    }
  }
  // stem BN + 2 BNs in the one block: 3 x (4 + 4 + 1)
  EXPECT_EQ(state, 27);
  // The optimiser's mask: 0 exactly on the state entries, 1 on every trainable element.
  const std::vector<float> mask = core::to_host(model->trainable_mask());
  ASSERT_EQ(mask.size(), static_cast<std::size_t>(model->parameter_buffer().extent(0)));
  for (const auto& info : model->parameter_info()) {
    for (std::int64_t i = info.offset; i < info.offset + info.count; ++i) {
      EXPECT_EQ(mask[static_cast<std::size_t>(i)], info.trainable ? 1.0f : 0.0f) << info.name << " " << i;
    }
  }
}

TEST(BatchNorm, SyncReducerGivesTheGlobalBatchStatistics) {
  // Two "ranks" in one process: the reducer adds the other half's statistics, so each half
  // normalises with the statistics of the whole batch, as one model on the whole batch does.
  const Shape in{2, 3, 3};
  auto make = [&] {
    auto m = std::make_unique<Sequential<double>>(in);
    m->add(std::make_unique<BatchNorm2D<double>>(2));
    m->finalize(3);
    return m;
  };
  auto whole = make(), half = make();
  const auto xs = random_values<double>(4 * 18, 11);
  const auto x = core::tensor_from_host<double>("x", {4, 2, 3, 3}, xs);
  const std::vector<double> first(xs.begin(), xs.begin() + 36), second(xs.begin() + 36, xs.end());
  // The second half's forward moments (shift 0: running_mean starts at zero) and count.
  std::vector<double> other(5, 0.0);
  for (int k = 0; k < 2; ++k)
    for (int ch = 0; ch < 2; ++ch)
      for (int i = 0; i < 9; ++i) {
        const double v = second[(k * 2 + ch) * 9 + i];
        other[ch] += v;
        other[2 + ch] += v * v;
      }
  other[4] = 18;
  int calls = 0;
  half->set_stat_reducer([&](double* v, std::size_t count) {
    ASSERT_EQ(count, 5u);
    for (std::size_t i = 0; i < count; ++i) v[i] += other[i];
    ++calls;
  });
  const std::vector<double> y_whole = core::to_host(whole->forward(x, true).data);
  const std::vector<double> y_half =
      core::to_host(half->forward(core::tensor_from_host<double>("x1", {2, 2, 3, 3}, first), true).data);
  EXPECT_EQ(calls, 1);
  for (std::size_t e = 0; e < y_half.size(); ++e) EXPECT_NEAR(y_half[e], y_whole[e], 1e-12) << e;
}

TEST(Blocks, RejectBadShapesAndConfigs) {
  EXPECT_THROW(BatchNorm2D<float>(0), Error);
  EXPECT_THROW(BatchNorm2D<float>(2, 0.0), Error);
  Sequential<float> model({3, 4, 4});
  EXPECT_THROW(model.add(std::make_unique<BatchNorm2D<float>>(2)), Error);
  Residual<float>::Chain main;
  main.push_back(std::make_unique<Conv2D<float>>(3, 4, 3, 1, 1));
  EXPECT_THROW(Residual<float>({3, 4, 4}, std::move(main)), Error);  // 4 channels + 3 channels
  EXPECT_THROW(build_model<float>({{"name", "resnet"}, {"blocks", 0}}), Error);
  EXPECT_THROW(build_model<float>({{"name", "resnet"}, {"channels", std::vector<int>{}}}), Error);
  EXPECT_THROW(build_model<float>({{"name", "resnet"}, {"depth", 3}}), Error);
  EXPECT_THROW(build_model<float>({{"name", "resnet"}, {"input_shape", {784}}}), Error);
}

TEST(Registry, ResnetHasTheSpecifiedLayout) {
  auto model = build_model<float>({{"name", "resnet"}});
  // stem conv, BN+ReLU; 3 stages x 1 block (its ReLU fused); GAP; dense
  ASSERT_EQ(model->layer_count(), 7u);
  EXPECT_EQ(model->layer(0).kind(), "conv2d");
  EXPECT_EQ(model->layer(1).kind(), "batchnorm2d");
  EXPECT_EQ(model->layer(2).kind(), "residual");
  EXPECT_EQ(model->layer(5).kind(), "globalavgpool2d");
  EXPECT_EQ(model->output_shape(), (Shape{10}));
  bool projection = false;
  for (const auto& info : model->parameter_info()) {
    if (info.name == "3.residual.shortcut.0.conv2d.weight") {
      projection = true;
      EXPECT_EQ(info.shape, (Shape{32, 16, 1, 1}));
    }
  }
  EXPECT_TRUE(projection);
}

}  // namespace
}  // namespace hpctrain::models
