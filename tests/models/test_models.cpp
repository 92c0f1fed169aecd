// Registry-built models: sizes, contiguous buffers, reproducible initialisation, end-to-end
// gradients through the loss, and a training smoke test.
#include "model_gradient_check.hpp"
#include "hpctrain/base/error.hpp"
#include "hpctrain/core/attention.hpp"
#include "hpctrain/core/optimizer.hpp"
#include "hpctrain/models/layers.hpp"
#include "hpctrain/models/registry.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace hpctrain::models {
namespace {

using hpctrain::testing::random_tensor;
using hpctrain::testing::random_values;
using nlohmann::json;

core::Labels make_labels(const std::vector<std::int32_t>& h) {
  core::Labels l("labels", h.size());
  core::from_host(l, h);
  return l;
}

TEST(Registry, MlpHasTheSpecifiedLayout) {
  const auto model = build_model<float>(json{{"name", "mlp"}});
  EXPECT_EQ(model->parameter_count(), 784 * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10);
  EXPECT_EQ(model->parameter_count(), 535818);
  EXPECT_EQ(model->input_shape(), (Shape{1, 28, 28}));
  EXPECT_EQ(model->output_shape(), (Shape{10}));
  const auto& info = model->parameter_info();
  ASSERT_EQ(info.size(), 6u);
  EXPECT_EQ(info[0].name, "1.dense.weight");
  EXPECT_EQ(info[0].shape, (Shape{512, 784}));
  EXPECT_EQ(info[1].name, "1.dense.bias");
  EXPECT_EQ(info[5].shape, (Shape{10}));
}

// Inference models (src/serve) free the gradient buffer: forward is unchanged bit for bit,
// backward refuses instead of writing into freed memory.
TEST(Sequential, ReleasedGradientsKeepForwardAndRefuseBackward) {
  for (const char* name : {"mlp", "cnn"}) {
    const auto model = build_model<float>(json{{"name", name}});
    const auto x = random_tensor<float>("x", {3, 1, 28, 28}, 7);
    const std::vector<float> before = core::to_host(model->forward(x, false).data);
    model->release_gradients();
    EXPECT_FALSE(model->has_gradients()) << name;
    EXPECT_EQ(model->gradient_buffer().extent(0), 0u) << name;
    const core::Tensor<float> y = model->forward(x, false);
    EXPECT_EQ(core::to_host(y.data), before) << name;
    EXPECT_THROW(model->backward(y), Error) << name;
  }
}

/// Records the need_input_grad of every backward it gets; passes the gradient through.
class BackwardProbe final : public Layer<float> {
 public:
  explicit BackwardProbe(std::vector<int>* calls) : calls_(calls) {}
  std::string kind() const override { return "probe"; }
  Shape output_shape(const Shape& in) const override { return in; }
  core::Tensor<float> forward(const core::Tensor<float>& x, bool) override { return x; }
  core::Tensor<float> backward(const core::Tensor<float>& dy, bool need_input_grad) override {
    calls_->push_back(need_input_grad ? 1 : 0);
    return need_input_grad ? dy : core::Tensor<float>();
  }

 private:
  std::vector<int>* calls_;
};

/// The input gradient of the first layer with parameters is computed only when the caller asks
/// for the model's input gradient: the MLP's first dense layer (after a flatten) needs no
/// 128x512x784 product for the pixels. Parameterless layers below it are not called at all; the
/// layer-done hook still sees every layer; the parameter gradients are the same either way.
TEST(Sequential, NoInputGradientBelowTheFirstLayerWithParameters) {
  std::vector<int> low, mid;
  Sequential<float> model(Shape{6});
  model.add(std::make_unique<BackwardProbe>(&low));
  model.add(std::make_unique<Dense<float>>(6, 5));
  model.add(std::make_unique<BackwardProbe>(&mid));
  model.add(std::make_unique<Dense<float>>(5, 3));
  model.finalize(3);
  const auto x = random_tensor<float>("x", {4, 6}, 11);
  const auto dy = random_tensor<float>("dy", {4, 3}, 12);

  model.forward(x, true);
  model.zero_gradients();
  std::vector<std::size_t> done;
  const core::Tensor<float> none = model.backward(dy, false, [&](std::size_t l) { done.push_back(l); });
  EXPECT_EQ(none.size(), 0);
  EXPECT_TRUE(low.empty());           // below the first dense layer: not called
  EXPECT_EQ(mid, std::vector<int>{1});  // between the dense layers: its input gradient is needed
  EXPECT_EQ(done, (std::vector<std::size_t>{3, 2, 1, 0}));
  const std::vector<float> grads_without = core::to_host(model.gradient_buffer());

  model.forward(x, true);
  model.zero_gradients();
  const core::Tensor<float> dx = model.backward(dy, true);
  EXPECT_EQ(low, std::vector<int>{1});
  EXPECT_EQ(dx.shape, (Shape{4, 6}));
  EXPECT_EQ(core::to_host(model.gradient_buffer()), grads_without);
}

/// begin_gradients(): layers that write their gradients (dense, token_dense) need no zeroing;
/// the others' slices are zeroed. The gradients equal zero_gradients() + backward (== compares
/// -0 and +0 equal, the one difference allowed), whatever the buffer held before (NaN: a
/// writing gemm must not read it); the write lasts one backward; redirect_gradients() sends the
/// gradients to another buffer and back without touching the model's own.
TEST(Sequential, BeginGradientsGivesWhatZeroingAndAddingGive) {
  for (const char* name : {"mlp", "cnn", "resnet", "transformer"}) {
    auto model = build_model<float>(json{{"name", name}});
    const auto x = random_tensor<float>("x", {3, 1, 28, 28}, 11);
    const auto dy = random_tensor<float>("dy", {3, 10}, 12);
    const std::size_t n = static_cast<std::size_t>(model->parameter_count());
    const auto pass = [&] {
      model->set_rng_position(5, 0);
      model->forward(x, true);
      model->backward(dy);
    };
    model->zero_gradients();
    pass();
    const std::vector<float> added = core::to_host(model->gradient_buffer());
    const std::vector<float> nan(n, std::numeric_limits<float>::quiet_NaN());
    core::from_host(model->gradient_buffer(), nan);
    model->begin_gradients();
    pass();
    const std::vector<float> written = core::to_host(model->gradient_buffer());
    std::size_t differ = 0;
    for (std::size_t i = 0; i < n; ++i) differ += !(written[i] == added[i]);
    EXPECT_EQ(differ, 0u) << name << ": begin_gradients + backward differs from zero_gradients + backward";
    // Without begin_gradients the next backward adds again: twice the gradient, up to the
    // rounding of the add inside a gemm (batch norm's state slots excepted: not gradients).
    pass();
    const std::vector<float> twice = core::to_host(model->gradient_buffer());
    const std::vector<float> mask = core::to_host(model->trainable_mask());
    // The second backward's gemms add into C (beta = 1) blockwise over the reduction, so an
    // element whose terms cancel carries the rounding of the larger partial sums: the bound is
    // relative to the buffer's largest gradient as well as to the element.
    float largest = 0.0f;
    for (std::size_t i = 0; i < n; ++i) largest = std::max(largest, mask[i] != 0.0f ? std::fabs(added[i]) : 0.0f);
    differ = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const bool close = std::fabs(twice[i] - 2.0f * added[i]) <= 1e-5f * std::fabs(added[i]) + 1e-6f * largest;
      differ += mask[i] != 0.0f && !close;
      if (mask[i] != 0.0f && !close && differ <= 3) {
        ADD_FAILURE() << name << " [" << i << "]: twice " << twice[i] << ", added " << added[i] << ", largest " << largest;
      }
    }
    EXPECT_EQ(differ, 0u) << name << ": the write did not end with its backward";
    // Redirected: the gradients land in `other`, the model's own buffer is left alone.
    core::Vec<float> other("other", n);
    core::from_host(other, nan);
    model->redirect_gradients(other);
    model->begin_gradients();
    pass();
    model->redirect_gradients(core::Vec<float>());
    const std::vector<float> there = core::to_host(other);
    const std::vector<float> own = core::to_host(model->gradient_buffer());
    differ = 0;
    for (std::size_t i = 0; i < n; ++i) differ += !(there[i] == added[i]) + !(own[i] == twice[i] || (own[i] != own[i] && twice[i] != twice[i]));
    EXPECT_EQ(differ, 0u) << name << ": redirected gradients";
    core::Vec<float> short_buffer("short", n - 1);
    EXPECT_THROW(model->redirect_gradients(short_buffer), Error) << name;
  }
}

// Deterministic training's grouped passes: a forward and backward over 40 rows with leaf rows 16
// give every row's logits as 16-row passes do, and the gradient of the 16-, 16- and 8-row leaves'
// separate gradients added as (l0 + l1) + l2, bit for bit: the default MLP (the fc1 weight over
// libxsmm's row tiles), one with dropout (masks keyed by global sample), one with GELU (a call per
// leaf), the CNN (convolutions leaf by leaf, pooling), a smaller CNN with 3x3 kernels and two
// ResNets (batch norm with each leaf's own statistics; strided 1x1 shortcuts; residual sums), two
// transformers (patch embedding, layer norm, attention a leaf at a time, token MLPs); overlapping
// pooling refused.
TEST(Sequential, GroupedPassEqualsTheTreeOfMicroShardPasses) {
  for (const json& config : {json{{"name", "mlp"}}, json{{"name", "mlp"}, {"hidden", {48, 20}}, {"dropout", 0.3}},
                             json{{"name", "mlp"}, {"hidden", {48, 20}}, {"activation", "gelu"}},
                             json{{"name", "cnn"}}, json{{"name", "cnn"}, {"channels", {4, 6}}, {"kernel", 3}, {"hidden", json::array({24})}},
                             json{{"name", "resnet"}}, json{{"name", "resnet"}, {"channels", {4, 6}}, {"blocks", 2}},
                             json{{"name", "transformer"}, {"patch", 7}, {"dim", 16}, {"depth", 2}, {"heads", 2}, {"mlp_dim", 32}},
                             json{{"name", "transformer"}}}) {
    auto model = build_model<float>(config);
    ASSERT_TRUE(model->supports_gradient_leaves()) << config.dump();
    const std::int64_t rows = 40, leaf = 16, first_sample = 1000;
    const std::size_t n = static_cast<std::size_t>(model->parameter_count());
    const auto x = random_tensor<float>("x", {rows, 1, 28, 28}, 13);
    const auto dy = random_tensor<float>("dy", {rows, 10}, 14);
    const std::vector<float> hx = core::to_host(x.data), hdy = core::to_host(dy.data);
    const std::vector<float> nan(n, std::numeric_limits<float>::quiet_NaN());
    // a pass per leaf, each gradient written into its own buffer
    std::vector<std::vector<float>> grads, logits;
    for (std::int64_t first = 0; first < rows; first += leaf) {
      const std::int64_t r = std::min(leaf, rows - first);
      const auto xl = core::tensor_from_host<float>(
          "xl", {r, 1, 28, 28}, std::vector<float>(hx.begin() + first * 784, hx.begin() + (first + r) * 784));
      const auto dyl = core::tensor_from_host<float>(
          "dyl", {r, 10}, std::vector<float>(hdy.begin() + first * 10, hdy.begin() + (first + r) * 10));
      core::from_host(model->gradient_buffer(), nan);
      model->begin_gradients();
      model->set_rng_position(3, first_sample + first);
      const auto out = core::to_host(model->forward(xl, true).data);
      logits.emplace_back(out);
      model->backward(dyl);
      grads.push_back(core::to_host(model->gradient_buffer()));
    }
    std::vector<float> want = grads[0];
    for (std::size_t i = 0; i < n; ++i) want[i] = (grads[0][i] + grads[1][i]) + grads[2][i];
    // one pass over all rows, leaves of 16
    core::from_host(model->gradient_buffer(), nan);
    model->set_gradient_leaves(leaf);
    model->begin_gradients();
    model->set_rng_position(3, first_sample);
    const auto out = core::to_host(model->forward(x, true).data);
    model->backward(dy);
    model->set_gradient_leaves(0);
    const auto got = core::to_host(model->gradient_buffer());
    std::size_t differ = 0;
    for (std::size_t i = 0; i < n; ++i) differ += std::memcmp(&got[i], &want[i], sizeof(float)) != 0;
    EXPECT_EQ(differ, 0u) << config.dump() << ": gradient elements differing from the tree of leaf gradients";
    std::vector<float> rows_out;
    for (const auto& l : logits) rows_out.insert(rows_out.end(), l.begin(), l.end());
    EXPECT_EQ(std::memcmp(out.data(), rows_out.data(), out.size() * sizeof(float)), 0) << config.dump() << ": logits";
    // not the plain 40-row gradient (which sums each element's rows in one go)
    core::from_host(model->gradient_buffer(), nan);
    model->begin_gradients();
    model->set_rng_position(3, first_sample);
    model->forward(x, true);
    model->backward(dy);
    const auto plain = core::to_host(model->gradient_buffer());
    differ = 0;
    for (std::size_t i = 0; i < n; ++i) differ += std::memcmp(&plain[i], &want[i], sizeof(float)) != 0;
    EXPECT_GT(differ, 0u) << config.dump() << ": the comparison cannot tell the tree from a plain sum";
  }
  EXPECT_FALSE(MaxPool2D<float>(3, 2).supports_gradient_leaves());  // overlapping windows: atomic adds
  EXPECT_TRUE(MaxPool2D<float>(2).supports_gradient_leaves());
  // The attention runs its leaves one at a time on the held oneDNN (the start-up note) unless
  // this build runs them side by side; double always one at a time (the portable kernels).
  EXPECT_EQ(build_model<float>(json{{"name", "transformer"}})->leaves_one_at_a_time(),
            !core::attention_leaves_side_by_side<float>());
  EXPECT_TRUE(build_model<double>(json{{"name", "transformer"}})->leaves_one_at_a_time());
  for (const char* name : {"mlp", "cnn", "resnet"}) {
    EXPECT_FALSE(build_model<float>(json{{"name", name}})->leaves_one_at_a_time()) << name;
  }
  Sequential<float> overlapping({1, 8, 8});
  overlapping.add(std::make_unique<MaxPool2D<float>>(3, 2));
  overlapping.finalize(1);
  EXPECT_FALSE(overlapping.supports_gradient_leaves());
  EXPECT_THROW(overlapping.set_gradient_leaves(16), Error);
  overlapping.set_gradient_leaves(0);  // off is always allowed
}

TEST(Registry, CnnHasTheSpecifiedLayout) {
  const auto model = build_model<float>(json{{"name", "cnn"}});
  // conv 5x5x1x32 + 32, conv 5x5x32x64 + 64, dense 64*7*7 -> 256, dense 256 -> 10.
  const std::int64_t want = (25 * 32 + 32) + (25 * 32 * 64 + 64) + (3136 * 256 + 256) +
                            (256 * 10 + 10);
  EXPECT_EQ(model->parameter_count(), want);
  EXPECT_EQ(model->parameter_count(), 857738);
  EXPECT_EQ(model->parameter_info()[0].shape, (Shape{32, 1, 5, 5}));
  EXPECT_EQ(model->parameter_info()[4].shape, (Shape{256, 3136}));
  EXPECT_EQ(model->output_shape(), (Shape{10}));
  const auto y = model->forward(core::make_tensor<float>("x", {2, 1, 28, 28}), false);
  EXPECT_EQ(y.shape, (Shape{2, 10}));
}

/// The registry's CNN computes conv -> pool -> ReLU; the textbook order is conv -> ReLU -> pool.
/// They must be the same function with the same gradients, bit for bit (float, both conv
/// backends' default), on a batch with negative windows (zero-bias convs of random inputs).
template <class T>
void expect_reordered_cnn_matches_textbook_order() {
  const json config{{"name", "cnn"}, {"input_shape", {2, 9, 8}}, {"channels", {3, 4}},
                    {"kernel", 3}, {"hidden", {5}}, {"classes", 3}, {"seed", 7}};
  auto fast = build_model<T>(config);
  Sequential<T> textbook(Shape{2, 9, 8});
  std::int64_t in_c = 2;
  for (const std::int64_t ch : {3, 4}) {
    textbook.add(std::make_unique<Conv2D<T>>(in_c, ch, 3, 1, 1, core::Init::fan_in_uniform));
    textbook.add(std::make_unique<ActivationLayer<T>>(Activation::relu));
    textbook.add(std::make_unique<MaxPool2D<T>>(2));
    in_c = ch;
  }
  textbook.add(std::make_unique<Flatten<T>>());
  textbook.add(std::make_unique<Dense<T>>(core::shape_size(textbook.output_shape()), 5, core::Init::fan_in_uniform));
  textbook.add(std::make_unique<ActivationLayer<T>>(Activation::relu));
  textbook.add(std::make_unique<Dense<T>>(5, 3, core::Init::fan_in_uniform));
  textbook.finalize(7);
  ASSERT_EQ(fast->parameter_count(), textbook.parameter_count());
  Kokkos::deep_copy(textbook.parameter_buffer(), fast->parameter_buffer());
  const auto x = random_tensor<T>("x", {3, 2, 9, 8}, 31);
  const auto dy = random_tensor<T>("dy", {3, 3}, 32);
  fast->zero_gradients();
  textbook.zero_gradients();
  const auto y_fast = core::to_host(fast->forward(x, true).data);
  const auto y_text = core::to_host(textbook.forward(x, true).data);
  EXPECT_EQ(y_fast, y_text);
  fast->backward(dy);
  textbook.backward(dy);
  const auto g_fast = core::to_host(fast->gradient_buffer());
  const auto g_text = core::to_host(textbook.gradient_buffer());
  EXPECT_EQ(g_fast, g_text);
  std::size_t nonzero = 0;
  for (const T g : g_fast) nonzero += g != T(0);
  EXPECT_GT(nonzero, g_fast.size() / 2);  // the comparison is not between two zero vectors
}

TEST(Registry, CnnPoolBeforeReluIsTheTextbookOrderBitForBit) {
  expect_reordered_cnn_matches_textbook_order<float>();
  expect_reordered_cnn_matches_textbook_order<double>();
}

TEST(Registry, SizesComeFromTheConfig) {
  const auto mlp = build_model<float>(
      json{{"name", "mlp"}, {"input_shape", {3, 4}}, {"hidden", {7}}, {"classes", 5}});
  EXPECT_EQ(mlp->parameter_count(), 12 * 7 + 7 + 7 * 5 + 5);
  const auto cnn = build_model<float>(json{{"name", "cnn"}, {"input_shape", {3, 8, 8}},
                                           {"channels", {4}}, {"kernel", 3}, {"hidden", json::array()}});
  EXPECT_EQ(cnn->parameter_count(), (4 * 3 * 9 + 4) + (4 * 4 * 4 * 10 + 10));
  const auto with_dropout = build_model<float>(
      json{{"name", "mlp"}, {"hidden", {16}}, {"dropout", 0.5}, {"activation", "gelu"}});
  EXPECT_EQ(with_dropout->layer(2).kind(), "gelu");
  EXPECT_EQ(with_dropout->layer(3).kind(), "dropout");
}

TEST(Registry, RejectsBadConfigs) {
  EXPECT_THROW(build_model<float>(json{{"name", "vgg"}}), Error);
  EXPECT_THROW(build_model<float>(json{{"hidden", {3}}}), Error);
  EXPECT_THROW(build_model<float>(json{{"name", "mlp"}, {"hiden", {3}}}), Error);
  EXPECT_THROW(build_model<float>(json{{"name", "mlp"}, {"hidden", "big"}}), Error);
  EXPECT_THROW(build_model<float>(json{{"name", "cnn"}, {"kernel", 4}}), Error);
  EXPECT_THROW(build_model<float>(json{{"name", "cnn"}, {"input_shape", {784}}}), Error);
  EXPECT_THROW(build_model<float>(json{{"name", "mlp"}, {"activation", "tanh"}}), Error);
}

TEST(Registry, CustomModelsCanBeRegistered) {
  register_model<float>("linear", [](const json& c) {
    auto m = std::make_unique<Sequential<float>>(Shape{c.at("inputs").get<std::int64_t>()});
    m->add(std::make_unique<Dense<float>>(c.at("inputs").get<std::int64_t>(), 2));
    return m;  // build_model finalises it
  });
  const auto m = build_model<float>(json{{"name", "linear"}, {"inputs", 3}});
  EXPECT_TRUE(m->finalized());
  EXPECT_EQ(m->parameter_count(), 8);
  const auto names = registered_models<float>();
  EXPECT_NE(std::find(names.begin(), names.end(), "cnn"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "linear"), names.end());
}

template <class T>
bool inside(const T* p, const core::Vec<T>& buffer) {
  return p >= buffer.data() && p < buffer.data() + buffer.extent(0);
}

TEST(Model, ParametersAndGradientsAreViewsIntoTwoContiguousBuffers) {
  const auto model = build_model<float>(json{{"name", "cnn"}});
  const auto& info = model->parameter_info();
  const auto params = model->parameters();
  const auto grads = model->gradients();
  std::int64_t offset = 0;
  for (std::size_t i = 0; i < info.size(); ++i) {
    EXPECT_EQ(info[i].offset, offset) << info[i].name;  // registration order, no gaps
    offset += info[i].count;
    EXPECT_EQ(params[i].tensor.data.data(), model->parameter_buffer().data() + info[i].offset);
    EXPECT_EQ(grads[i].tensor.data.data(), model->gradient_buffer().data() + info[i].offset);
    EXPECT_TRUE(inside(params[i].tensor.data.data(), model->parameter_buffer()));
  }
  EXPECT_EQ(offset, model->parameter_count());
  EXPECT_EQ(model->gradient_buffer().extent(0), model->parameter_buffer().extent(0));
  EXPECT_FALSE(inside(model->gradient_buffer().data(), model->parameter_buffer()));

  // The layers really compute with the buffer: zero it and the logits are zero.
  auto small = build_model<float>(
      json{{"name", "mlp"}, {"input_shape", {4}}, {"hidden", {3}}, {"classes", 3}});
  const auto x = random_tensor<float>("x", {2, 4}, 5);
  const auto before = core::to_host(small->forward(x, false).data);
  EXPECT_NE(before, std::vector<float>(6, 0.f));
  core::fill(small->parameter_buffer(), 0.f);
  EXPECT_EQ(core::to_host(small->forward(x, false).data), std::vector<float>(6, 0.f));
  // ... and backward writes into the gradient buffer, accumulating until zeroed.
  small->initialize_parameters(1);
  small->forward(x, true);
  const auto dy = random_tensor<float>("dy", {2, 3}, 6);
  small->zero_gradients();
  small->backward(dy);
  const auto once = core::to_host(small->gradient_buffer());
  small->forward(x, true);
  small->backward(dy);
  const auto twice = core::to_host(small->gradient_buffer());
  double norm = 0.0;
  for (std::size_t i = 0; i < once.size(); ++i) {
    EXPECT_FLOAT_EQ(twice[i], 2 * once[i]);
    norm += std::fabs(once[i]);
  }
  EXPECT_GT(norm, 0.0);
  small->zero_gradients();
  EXPECT_EQ(core::sum_of_squares(small->gradient_buffer()), 0.0);
}

TEST(Model, InitialisationDependsOnlyOnTheSeed) {
  const json cfg{{"name", "cnn"}, {"channels", {4, 8}}, {"hidden", {16}}, {"seed", 9}};
  const auto a = core::to_host(build_model<float>(cfg)->parameter_buffer());
  EXPECT_EQ(a, core::to_host(build_model<float>(cfg)->parameter_buffer()));
  json other = cfg;
  other["seed"] = 10;
  EXPECT_NE(a, core::to_host(build_model<float>(other)->parameter_buffer()));
  // A parameter's values do not depend on the other parameters: a wider classifier head
  // leaves the conv weights unchanged.
  json wider = cfg;
  wider["hidden"] = {32};
  const auto b = core::to_host(build_model<float>(wider)->parameter_buffer());
  const std::size_t conv_params = (4 * 25 + 4) + (8 * 4 * 25 + 8);
  EXPECT_TRUE(std::equal(a.begin(), a.begin() + conv_params, b.begin()));
  // float and double models from one config agree to float rounding.
  const auto d = build_model<double>(cfg);
  const auto f = build_model<float>(cfg);
  const auto xd = random_tensor<double>("x", {2, 1, 28, 28}, 3);
  const auto yd = core::to_host(d->forward(xd, false).data);
  const auto yf = core::to_host(f->forward(core::convert<float>(xd, "xf"), false).data);
  for (std::size_t i = 0; i < yd.size(); ++i) EXPECT_NEAR(yf[i], yd[i], 1e-4 * (1 + std::fabs(yd[i])));
}

void check_end_to_end(const json& config, std::int64_t batch, std::size_t stride) {
  auto model = build_model<double>(config);
  // Random biases too: with zero biases a sample whose hidden units are all inactive puts the
  // next ReLU exactly at its kink, where finite differences are meaningless.
  const auto params = random_tensor<double>("p", {model->parameter_count()}, 199, -0.5, 0.5);
  Kokkos::deep_copy(model->parameter_buffer(), params.data);
  const std::vector<std::int32_t> hl = {0, 2, 1, 2, 1};
  const auto labels = make_labels(std::vector<std::int32_t>(hl.begin(), hl.begin() + batch));
  Shape x_shape{batch};
  for (auto d : model->input_shape()) x_shape.push_back(d);
  const auto x = random_tensor<double>("x", x_shape, 200);
  const Shape y_shape{batch, 3};
  auto dlogits = core::make_tensor<double>("dlogits", y_shape);
  auto scratch = core::make_tensor<double>("scratch", y_shape);
  hpctrain::testing::expect_model_gradients(
      *model, x,
      [&](const core::Tensor<double>& y) {
        return core::softmax_cross_entropy(y, labels, batch, scratch);
      },
      [&](const core::Tensor<double>& y) {
        core::softmax_cross_entropy(y, labels, batch, dlogits);
        return dlogits;
      },
      stride);
}

TEST(ModelGradients, MlpEndToEndThroughTheLoss) {
  check_end_to_end(json{{"name", "mlp"}, {"input_shape", {6}}, {"hidden", {5, 4}}, {"classes", 3},
                        {"seed", 1}},
                   4, 1);
}

TEST(ModelGradients, MlpWithGeluAndDropout) {
  check_end_to_end(json{{"name", "mlp"}, {"input_shape", {2, 3}}, {"hidden", {6}},
                        {"classes", 3}, {"activation", "gelu"}, {"dropout", 0.3}, {"seed", 2}},
                   5, 1);
}

TEST(ModelGradients, CnnEndToEndThroughTheLoss) {
  check_end_to_end(json{{"name", "cnn"}, {"input_shape", {1, 6, 6}}, {"channels", {2, 3}},
                        {"kernel", 3}, {"hidden", {4}}, {"classes", 3}, {"seed", 3}},
                   3, 1);
}

/// Full-batch SGD on a problem a small MLP can fit: labels from a random linear teacher.
/// Returns the loss before and after `steps` steps; without backward the gradients stay zero.
std::pair<double, double> train_teacher_problem(int steps, bool run_backward) {
  const std::int64_t n = 64, d = 20, k = 4;
  auto model = build_model<float>(
      json{{"name", "mlp"}, {"input_shape", {d}}, {"hidden", {32}}, {"classes", k}, {"seed", 4}});
  const auto hx = random_values<float>(static_cast<std::size_t>(n * d), 300);
  const auto teacher = random_values<double>(static_cast<std::size_t>(k * d), 301);
  std::vector<std::int32_t> hl(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    double best = -1e300;
    for (std::int64_t c = 0; c < k; ++c) {
      double s = 0.0;
      for (std::int64_t j = 0; j < d; ++j) s += teacher[c * d + j] * hx[i * d + j];
      if (s > best) { best = s; hl[i] = static_cast<std::int32_t>(c); }
    }
  }
  const auto x = core::tensor_from_host<float>("x", {n, d}, hx);
  const auto labels = make_labels(hl);
  auto dlogits = core::make_tensor<float>("dlogits", {n, k});
  core::Sgd<float> sgd(core::SgdOptions{0.1, 0.9, 0.0, false});
  double first = 0.0, last = 0.0;
  for (int s = 0; s <= steps; ++s) {
    model->zero_gradients();
    last = core::softmax_cross_entropy(model->forward(x, true), labels, n, dlogits);
    if (s == 0) first = last;
    if (s == steps) break;
    if (run_backward) model->backward(dlogits);
    sgd.step(model->parameter_buffer(), model->gradient_buffer());
  }
  return {first, last};
}

TEST(Training, MlpFitsASyntheticProblemOnlyWithGradients) {
  const auto [first, last] = train_teacher_problem(60, true);
  EXPECT_GT(first, 0.8);  // near log(4) = 1.39 at initialisation
  EXPECT_LT(last, 0.2);
  const auto [first0, last0] = train_teacher_problem(60, false);
  EXPECT_DOUBLE_EQ(first0, first);
  EXPECT_GT(last0, 0.2);  // zero gradients cannot reach the threshold
}

}  // namespace
}  // namespace hpctrain::models
