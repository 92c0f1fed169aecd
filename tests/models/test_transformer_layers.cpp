// The transformer leaf layers: backward against float64 central finite differences (alone and
// chained), forward against naive host references written here from the definitions, float
// against double, buffer reuse, leaf rows (a grouped pass against a pass per leaf, bit for bit)
// and the errors for bad configurations.
#include "model_gradient_check.hpp"
#include "hpctrain/base/error.hpp"
#include "hpctrain/core/leaf_tree.hpp"
#include "hpctrain/models/layers.hpp"
#include "hpctrain/models/registry.hpp"
#include "hpctrain/models/transformer_layers.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace hpctrain::models {
namespace {

using hpctrain::testing::check_single_layer;
using hpctrain::testing::expect_model_gradients_weighted;
using hpctrain::testing::random_tensor;
using Host = std::vector<double>;

template <class L, class... Args>
std::unique_ptr<Layer<double>> make(Args... args) {
  return std::make_unique<L>(args...);
}

// ---- finite differences ----------------------------------------------------------------------

TEST(TransformerGradients, PatchEmbeddingNonSquareImage) {
  check_single_layer({2, 4, 6}, make<PatchEmbedding<double>>(2, 4, 6, 2, 5), 1, 200);
  check_single_layer({2, 4, 6}, make<PatchEmbedding<double>>(2, 4, 6, 2, 5), 3, 201);
}

TEST(TransformerGradients, PatchEmbeddingWholeImageIsOnePatch) {
  check_single_layer({1, 3, 3}, make<PatchEmbedding<double>>(1, 3, 3, 3, 4), 3, 205);
}

TEST(TransformerGradients, LayerNormOverTokens) {
  check_single_layer({5, 6}, make<LayerNorm<double>>(6), 1, 210);
  check_single_layer({5, 6}, make<LayerNorm<double>>(6), 3, 211);
}

TEST(TransformerGradients, LayerNormFlatSamplesAndLargeEps) {
  check_single_layer({7}, make<LayerNorm<double>>(7, 0.3), 3, 215);
}

TEST(TransformerGradients, MultiHeadSelfAttention) {
  for (const std::int64_t heads : {1, 2, 3, 6}) {
    for (const std::int64_t batch : {1, 3}) {
      SCOPED_TRACE("heads " + std::to_string(heads) + ", batch " + std::to_string(batch));
      check_single_layer({5, 6}, make<MultiHeadSelfAttention<double>>(6, heads), batch,
                         220 + static_cast<std::uint32_t>(heads * 10 + batch));
    }
  }
}

TEST(TransformerGradients, MultiHeadSelfAttentionOneToken) {
  check_single_layer({1, 4}, make<MultiHeadSelfAttention<double>>(4, 2), 3, 290);
}

// Random weights in [-1, 1] leave the softmax soft (scores of order 1), so every term of the
// softmax backward matters; scaling the inputs up makes the probabilities peaked, which is
// where a missing max subtraction or a wrong Jacobian term shows differently.
TEST(TransformerGradients, MultiHeadSelfAttentionPeakedSoftmax) {
  Sequential<double> model({5, 6});
  model.add(std::make_unique<MultiHeadSelfAttention<double>>(6, 2));
  model.finalize(300);
  Kokkos::deep_copy(model.parameter_buffer(),
                    random_tensor<double>("p", {model.parameter_count()}, 301).data);
  expect_model_gradients_weighted(model, random_tensor<double>("x", {3, 5, 6}, 302, -3.0, 3.0),
                                  303);
}

TEST(TransformerGradients, TokenDense) {
  check_single_layer({5, 6}, make<TokenDense<double>>(6, 4), 1, 310);
  check_single_layer({5, 6}, make<TokenDense<double>>(6, 4), 3, 311);
}

TEST(TransformerGradients, SelectToken) {
  check_single_layer({5, 6}, make<SelectToken<double>>(0), 3, 320);
  check_single_layer({5, 6}, make<SelectToken<double>>(4), 1, 321);
}

std::unique_ptr<Sequential<double>> encoder_chain(std::uint64_t seed) {
  auto model = std::make_unique<Sequential<double>>(Shape{2, 4, 6});
  model->add(std::make_unique<PatchEmbedding<double>>(2, 4, 6, 2, 6))
      .add(std::make_unique<LayerNorm<double>>(6))
      .add(std::make_unique<MultiHeadSelfAttention<double>>(6, 3))
      .add(std::make_unique<TokenDense<double>>(6, 5))
      .add(std::make_unique<ActivationLayer<double>>(Activation::gelu))
      .add(std::make_unique<SelectToken<double>>(0))
      .add(std::make_unique<Dense<double>>(5, 3));
  model->finalize(seed);
  return model;
}

TEST(TransformerGradients, EncoderChain) {
  const auto model = encoder_chain(330);
  EXPECT_EQ(model->layer(0).output_shape({2, 4, 6}), (Shape{7, 6}));
  EXPECT_EQ(model->output_shape(), (Shape{3}));
  Kokkos::deep_copy(model->parameter_buffer(),
                    random_tensor<double>("p", {model->parameter_count()}, 331).data);
  expect_model_gradients_weighted(*model, random_tensor<double>("x", {3, 2, 4, 6}, 332), 333);
}

// ---- forward against naive references ---------------------------------------------------------

Host param(Sequential<double>& model, std::size_t i) {
  return core::to_host(model.parameters().at(i).tensor.data);
}

/// A one-layer model with random parameters in [-1, 1].
std::unique_ptr<Sequential<double>> single(Shape sample, std::unique_ptr<Layer<double>> layer,
                                           std::uint32_t seed) {
  auto model = std::make_unique<Sequential<double>>(std::move(sample));
  model->add(std::move(layer));
  model->finalize(seed);
  Kokkos::deep_copy(model->parameter_buffer(),
                    random_tensor<double>("p", {model->parameter_count()}, seed + 1).data);
  return model;
}

void expect_close(const Host& got, const Host& want, double tol = 1e-12) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], tol * (1.0 + std::fabs(want[i]))) << "element " << i;
  }
}

Host naive_layer_norm(const Host& x, std::size_t dim, const Host& w, const Host& b, double eps) {
  Host y(x.size());
  for (std::size_t r = 0; r < x.size() / dim; ++r) {
    double mean = 0, var = 0;
    for (std::size_t d = 0; d < dim; ++d) mean += x[r * dim + d] / static_cast<double>(dim);
    for (std::size_t d = 0; d < dim; ++d) {
      var += (x[r * dim + d] - mean) * (x[r * dim + d] - mean) / static_cast<double>(dim);
    }
    for (std::size_t d = 0; d < dim; ++d) {
      y[r * dim + d] = (x[r * dim + d] - mean) / std::sqrt(var + eps) * w[d] + b[d];
    }
  }
  return y;
}

TEST(TransformerForward, LayerNormMatchesNaiveReference) {
  const auto model = single({4, 6}, make<LayerNorm<double>>(6, 1e-3), 400);
  // Offset and scaled rows: mean and variance are far from 0 and 1.
  const auto x = random_tensor<double>("x", {3, 4, 6}, 402, 5.0, 9.0);
  const Host y = core::to_host(model->forward(x, false).data);
  expect_close(y, naive_layer_norm(core::to_host(x.data), 6, param(*model, 0), param(*model, 1),
                                   1e-3));
}

TEST(TransformerForward, LayerNormDefaultsAreIdentityScaleAndShift) {
  Sequential<double> model({6});
  model.add(std::make_unique<LayerNorm<double>>(6));
  model.finalize(410);
  expect_close(param(model, 0), Host(6, 1.0), 0.0);
  expect_close(param(model, 1), Host(6, 0.0), 0.0);
  const auto x = random_tensor<double>("x", {2, 6}, 411);
  const Host y = core::to_host(model.forward(x, false).data);
  for (std::size_t r = 0; r < 2; ++r) {
    double mean = 0, sq = 0;
    for (std::size_t d = 0; d < 6; ++d) mean += y[r * 6 + d] / 6;
    for (std::size_t d = 0; d < 6; ++d) sq += (y[r * 6 + d] - mean) * (y[r * 6 + d] - mean) / 6;
    EXPECT_NEAR(mean, 0.0, 1e-12);
    EXPECT_NEAR(sq, 1.0, 1e-4);  // var / (var + eps) with eps = 1e-5
  }
}

struct ImageGeometry {
  std::size_t n, c, h, w, p, d;
};

Host naive_patch_embedding(const ImageGeometry& g, const Host& x, const Host& weight,
                           const Host& bias, const Host& cls, const Host& pos) {
  const std::size_t pw = g.w / g.p, patches = (g.h / g.p) * pw, tokens = patches + 1;
  const std::size_t f = g.c * g.p * g.p;
  Host y(g.n * tokens * g.d);
  for (std::size_t n = 0; n < g.n; ++n) {
    for (std::size_t d = 0; d < g.d; ++d) y[(n * tokens) * g.d + d] = cls[d] + pos[d];
    for (std::size_t i = 0; i < patches; ++i) {
      for (std::size_t d = 0; d < g.d; ++d) {
        double s = bias[d];
        for (std::size_t c = 0; c < g.c; ++c) {
          for (std::size_t a = 0; a < g.p; ++a) {
            for (std::size_t b = 0; b < g.p; ++b) {
              const std::size_t row = (i / pw) * g.p + a, col = (i % pw) * g.p + b;
              s += weight[d * f + (c * g.p + a) * g.p + b] *
                   x[((n * g.c + c) * g.h + row) * g.w + col];
            }
          }
        }
        y[(n * tokens + 1 + i) * g.d + d] = s + pos[(1 + i) * g.d + d];
      }
    }
  }
  return y;
}

TEST(TransformerForward, PatchEmbeddingMatchesNaiveReference) {
  const ImageGeometry g{3, 2, 4, 6, 2, 5};
  const auto model = single({2, 4, 6}, make<PatchEmbedding<double>>(2, 4, 6, 2, 5), 420);
  EXPECT_EQ(model->output_shape(), (Shape{7, 5}));
  const auto x = random_tensor<double>("x", {3, 2, 4, 6}, 422);
  const Host y = core::to_host(model->forward(x, false).data);
  expect_close(y, naive_patch_embedding(g, core::to_host(x.data), param(*model, 0),
                                        param(*model, 1), param(*model, 2), param(*model, 3)));
}

TEST(TransformerForward, PatchEmbeddingParameterLayout) {
  Sequential<double> model({1, 28, 28});
  model.add(std::make_unique<PatchEmbedding<double>>(1, 28, 28, 7, 16));
  model.finalize(430);
  EXPECT_EQ(model.output_shape(), (Shape{17, 16}));
  const auto& info = model.parameter_info();
  ASSERT_EQ(info.size(), 4u);
  EXPECT_EQ(info[0].name, "0.patch_embedding.weight");
  EXPECT_EQ(info[0].shape, (Shape{16, 49}));
  EXPECT_EQ(info[1].name, "0.patch_embedding.bias");
  EXPECT_EQ(info[2].name, "0.patch_embedding.class_token");
  EXPECT_EQ(info[2].shape, (Shape{16}));
  EXPECT_EQ(info[3].name, "0.patch_embedding.position");
  EXPECT_EQ(info[3].shape, (Shape{17, 16}));
  // Small but non-zero class token and positions: |v| <= sqrt(3 / D).
  for (const std::size_t i : {2u, 3u}) {
    const Host v = param(model, i);
    const double max_abs = std::fabs(*std::max_element(
        v.begin(), v.end(), [](double a, double b) { return std::fabs(a) < std::fabs(b); }));
    EXPECT_GT(max_abs, 0.0);
    EXPECT_LE(max_abs, std::sqrt(3.0 / 16.0));
  }
}

struct AttentionWeights {
  Host qkv_w, qkv_b, out_w, out_b;
};

/// y = x W^T + b per row of x[rows, in]; w is [out, in].
Host naive_affine(const Host& x, std::size_t in, const Host& w, const Host& b) {
  const std::size_t out = b.size(), rows = x.size() / in;
  Host y(rows * out);
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t o = 0; o < out; ++o) {
      double s = b[o];
      for (std::size_t i = 0; i < in; ++i) s += x[r * in + i] * w[o * in + i];
      y[r * out + o] = s;
    }
  }
  return y;
}

Host naive_attention(const Host& x, std::size_t n, std::size_t t, std::size_t d,
                     std::size_t heads, const AttentionWeights& p) {
  const Host qkv = naive_affine(x, d, p.qkv_w, p.qkv_b);  // [n t, 3d]
  const std::size_t dh = d / heads;
  Host context(n * t * d);
  for (std::size_t s = 0; s < n; ++s) {
    for (std::size_t h = 0; h < heads; ++h) {
      const auto at = [&](std::size_t part, std::size_t tok, std::size_t j) {
        return qkv[(s * t + tok) * 3 * d + part * d + h * dh + j];
      };
      for (std::size_t i = 0; i < t; ++i) {
        Host score(t);
        for (std::size_t k = 0; k < t; ++k) {
          for (std::size_t j = 0; j < dh; ++j) score[k] += at(0, i, j) * at(1, k, j);
          score[k] /= std::sqrt(static_cast<double>(dh));
        }
        const double m = *std::max_element(score.begin(), score.end());
        double z = 0;
        for (double& v : score) z += (v = std::exp(v - m));
        for (std::size_t j = 0; j < dh; ++j) {
          double o = 0;
          for (std::size_t k = 0; k < t; ++k) o += score[k] / z * at(2, k, j);
          context[(s * t + i) * d + h * dh + j] = o;
        }
      }
    }
  }
  return naive_affine(context, d, p.out_w, p.out_b);
}

TEST(TransformerForward, MultiHeadSelfAttentionMatchesNaiveReference) {
  for (const std::int64_t heads : {1, 2, 3}) {
    SCOPED_TRACE("heads " + std::to_string(heads));
    const auto model = single({5, 6}, make<MultiHeadSelfAttention<double>>(6, heads), 440);
    const auto x = random_tensor<double>("x", {3, 5, 6}, 442, -2.0, 2.0);
    const Host y = core::to_host(model->forward(x, false).data);
    const AttentionWeights p{param(*model, 0), param(*model, 1), param(*model, 2),
                             param(*model, 3)};
    expect_close(y, naive_attention(core::to_host(x.data), 3, 5, 6,
                                    static_cast<std::size_t>(heads), p));
  }
}

// Scores around 1e3 overflow exp() without the row-max subtraction.
TEST(TransformerForward, MultiHeadSelfAttentionSoftmaxIsStableForLargeScores) {
  const auto model = single({4, 2}, make<MultiHeadSelfAttention<double>>(2, 1), 450);
  const auto x = random_tensor<double>("x", {2, 4, 2}, 452, 20.0, 40.0);
  const Host y = core::to_host(model->forward(x, false).data);
  for (const double v : y) EXPECT_TRUE(std::isfinite(v));
  const AttentionWeights p{param(*model, 0), param(*model, 1), param(*model, 2),
                           param(*model, 3)};
  expect_close(y, naive_attention(core::to_host(x.data), 2, 4, 2, 1, p), 1e-9);
}

TEST(TransformerForward, TokenDenseAndSelectTokenMatchNaiveReference) {
  const auto dense = single({5, 6}, make<TokenDense<double>>(6, 4), 460);
  const auto x = random_tensor<double>("x", {3, 5, 6}, 462);
  const Host xh = core::to_host(x.data);
  expect_close(core::to_host(dense->forward(x, false).data),
               naive_affine(xh, 6, param(*dense, 0), param(*dense, 1)));
  SelectToken<double> select(2);
  const Host y = core::to_host(select.forward(x, false).data);
  ASSERT_EQ(y.size(), 18u);
  for (std::size_t s = 0; s < 3; ++s) {
    for (std::size_t d = 0; d < 6; ++d) EXPECT_EQ(y[s * 6 + d], xh[(s * 5 + 2) * 6 + d]);
  }
}

// ---- float, buffers, configuration --------------------------------------------------------------

// The float instantiations (oneDNN gemm where built) against double on the same parameters.
TEST(TransformerForward, FloatEncoderMatchesDouble) {
  const auto d = encoder_chain(470);
  Sequential<float> f({2, 4, 6});
  f.add(std::make_unique<PatchEmbedding<float>>(2, 4, 6, 2, 6))
      .add(std::make_unique<LayerNorm<float>>(6))
      .add(std::make_unique<MultiHeadSelfAttention<float>>(6, 3))
      .add(std::make_unique<TokenDense<float>>(6, 5))
      .add(std::make_unique<ActivationLayer<float>>(Activation::gelu))
      .add(std::make_unique<SelectToken<float>>(0))
      .add(std::make_unique<Dense<float>>(5, 3));
  f.finalize(470);
  const auto p = random_tensor<double>("p", {d->parameter_count()}, 471);
  Kokkos::deep_copy(d->parameter_buffer(), p.data);
  Kokkos::deep_copy(f.parameter_buffer(), core::convert<float>(p, "pf").data);
  const auto x = random_tensor<double>("x", {4, 2, 4, 6}, 472);
  const Host yd = core::to_host(d->forward(x, true).data);
  const auto yf = core::to_host(f.forward(core::convert<float>(x, "xf"), true).data);
  ASSERT_EQ(yf.size(), yd.size());
  for (std::size_t i = 0; i < yd.size(); ++i) EXPECT_NEAR(yf[i], yd[i], 1e-4) << i;
  const auto dy = random_tensor<double>("dy", {4, 3}, 473);
  d->zero_gradients();
  f.zero_gradients();
  const Host dxd = core::to_host(d->backward(dy, true).data);
  const auto dxf = core::to_host(f.backward(core::convert<float>(dy, "dyf"), true).data);
  for (std::size_t i = 0; i < dxd.size(); ++i) EXPECT_NEAR(dxf[i], dxd[i], 1e-4) << i;
}

TEST(TransformerLayers, AttentionReusesItsBuffersWhileTheShapeRepeats) {
  const auto model = single({5, 6}, make<MultiHeadSelfAttention<double>>(6, 2), 480);
  const auto x = random_tensor<double>("x", {3, 5, 6}, 481);
  const double* y0 = model->forward(x, true).data.data();
  const double* dx0 = model->backward(x, true).data.data();
  EXPECT_EQ(model->forward(x, true).data.data(), y0);
  EXPECT_EQ(model->backward(x, true).data.data(), dx0);
}

// ---- leaf rows (deterministic training's grouped passes) --------------------------------------

/// `model` over `rows` samples in leaves of `leaf` samples: the grouped pass's outputs and input
/// gradients are, row for row, those of a pass over each leaf alone, and its parameter gradients
/// those passes' gradients added over core/leaf_tree.hpp's tree -- bit for bit. The gradients
/// start as NaN, so one that is neither written nor zeroed shows; and the plain pass over all
/// rows must differ from the tree somewhere, or the comparison could not tell them apart.
void expect_grouped_pass_is_the_leaf_tree(Sequential<float>& model, std::int64_t rows, std::int64_t leaf,
                                          std::uint32_t seed) {
  ASSERT_TRUE(model.supports_gradient_leaves());
  const std::int64_t in = core::shape_size(model.input_shape()), out = core::shape_size(model.output_shape());
  const auto n = static_cast<std::size_t>(model.parameter_count());
  const auto batch = [](std::int64_t r, const Shape& sample) {
    Shape s{r};
    s.insert(s.end(), sample.begin(), sample.end());
    return s;
  };
  const auto hx = hpctrain::testing::random_values<float>(static_cast<std::size_t>(rows * in), seed);
  const auto hdy = hpctrain::testing::random_values<float>(static_cast<std::size_t>(rows * out), seed + 1);
  const std::vector<float> nan(n, std::numeric_limits<float>::quiet_NaN());
  const auto slice = [&](const std::vector<float>& v, std::int64_t width, std::int64_t first, std::int64_t count) {
    return std::vector<float>(v.begin() + first * width, v.begin() + (first + count) * width);
  };
  // a pass per leaf: its outputs and input gradients in order, its gradient apart
  std::vector<float> want_y, want_dx;
  std::vector<std::vector<float>> grads;
  core::for_each_leaf(leaf, rows, [&](std::int64_t first, std::int64_t count) {
    core::from_host(model.gradient_buffer(), nan);
    model.begin_gradients();
    const auto y = core::to_host(
        model.forward(core::tensor_from_host<float>("xl", batch(count, model.input_shape()), slice(hx, in, first, count)), true).data);
    const auto dx = core::to_host(
        model.backward(core::tensor_from_host<float>("dyl", batch(count, model.output_shape()), slice(hdy, out, first, count)), true)
            .data);
    want_y.insert(want_y.end(), y.begin(), y.end());
    want_dx.insert(want_dx.end(), dx.begin(), dx.end());
    grads.push_back(core::to_host(model.gradient_buffer()));
  });
  std::vector<std::vector<float>> slots(static_cast<std::size_t>(core::leaf_tree_depth(core::leaf_count(rows, leaf))));
  core::leaf_tree_sum(
      core::leaf_count(rows, leaf), [&](std::int64_t l, int d) { slots[static_cast<std::size_t>(d)] = grads[static_cast<std::size_t>(l)]; },
      [&](int dst, int src) {
        for (std::size_t i = 0; i < n; ++i) slots[static_cast<std::size_t>(dst)][i] += slots[static_cast<std::size_t>(src)][i];
      });
  const std::vector<float>& want = slots[0];
  const auto x = core::tensor_from_host<float>("x", batch(rows, model.input_shape()), hx);
  const auto dy = core::tensor_from_host<float>("dy", batch(rows, model.output_shape()), hdy);
  const auto differing = [](const std::vector<float>& a, const std::vector<float>& b) {
    std::size_t count = a.size() == b.size() ? 0 : std::max(a.size(), b.size());
    for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) count += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return count;
  };
  // one grouped pass
  core::from_host(model.gradient_buffer(), nan);
  model.set_gradient_leaves(leaf);
  model.begin_gradients();
  const auto y = core::to_host(model.forward(x, true).data);
  const auto dx = core::to_host(model.backward(dy, true).data);
  model.set_gradient_leaves(0);
  EXPECT_EQ(differing(y, want_y), 0u) << "outputs";
  EXPECT_EQ(differing(dx, want_dx), 0u) << "input gradients";
  EXPECT_EQ(differing(core::to_host(model.gradient_buffer()), want), 0u) << "parameter gradients";
  // the plain pass over all rows sums each element's rows in one go
  core::from_host(model.gradient_buffer(), nan);
  model.begin_gradients();
  model.forward(x, true);
  model.backward(dy, true);
  EXPECT_GT(differing(core::to_host(model.gradient_buffer()), want), 0u) << "the plain sum equals the tree";
}

/// One float layer in a model over samples of `shape`.
template <class L, class... Args>
std::unique_ptr<Sequential<float>> leaf_model(const Shape& shape, std::uint64_t seed, Args... args) {
  auto model = std::make_unique<Sequential<float>>(shape);
  model->add(std::make_unique<L>(args...));
  model->finalize(seed);
  return model;
}

// 9 samples in leaves of 2: five leaves, ((l0 + l1) + (l2 + l3)) + l4, the last a sample short.
TEST(TransformerLeaves, PatchEmbeddingIsTheTreeOfItsLeaves) {
  auto model = leaf_model<PatchEmbedding<float>>({2, 8, 12}, 500, 2, 8, 12, 4, 6);
  expect_grouped_pass_is_the_leaf_tree(*model, 9, 2, 501);
}

// 40 tokens a sample: a leaf of 2 samples is 80 rows, so LayerNorm's chunks of 64 rows restart
// inside every leaf.
TEST(TransformerLeaves, LayerNormIsTheTreeOfItsLeaves) {
  auto model = leaf_model<LayerNorm<float>>({40, 12}, 510, 12);
  expect_grouped_pass_is_the_leaf_tree(*model, 9, 2, 511);
  expect_grouped_pass_is_the_leaf_tree(*model, 7, 3, 512);
}

TEST(TransformerLeaves, MultiHeadSelfAttentionIsTheTreeOfItsLeaves) {
  auto model = leaf_model<MultiHeadSelfAttention<float>>({7, 8}, 520, 8, 2);
  expect_grouped_pass_is_the_leaf_tree(*model, 9, 2, 521);
  expect_grouped_pass_is_the_leaf_tree(*model, 40, 16, 522);
}

TEST(TransformerLeaves, TokenDenseAndSelectTokenAreTheTreeOfTheirLeaves) {
  auto model = std::make_unique<Sequential<float>>(Shape{5, 7});
  model->add(std::make_unique<TokenDense<float>>(7, 9)).add(std::make_unique<SelectToken<float>>(2));
  model->finalize(530);
  expect_grouped_pass_is_the_leaf_tree(*model, 9, 2, 531);
}

TEST(TransformerLeaves, TransformerModelIsTheTreeOfItsLeaves) {
  auto model = build_model<float>(nlohmann::json{{"name", "transformer"}, {"input_shape", {1, 8, 8}}, {"classes", 3},
                                                 {"patch", 4}, {"dim", 8}, {"depth", 2}, {"heads", 2}, {"mlp_dim", 16}});
  expect_grouped_pass_is_the_leaf_tree(*model, 9, 2, 541);
}

TEST(TransformerLeaves, InPlaceTreeIsTheLeafTree) {
  for (std::int64_t leaves = 1; leaves <= 40; ++leaves) {
    const auto terms = hpctrain::testing::random_values<float>(static_cast<std::size_t>(leaves), 550 + static_cast<std::uint32_t>(leaves), -1e3, 1e3);
    std::vector<float> slots(static_cast<std::size_t>(core::leaf_tree_depth(leaves)));
    core::leaf_tree_sum(
        leaves, [&](std::int64_t l, int d) { slots[static_cast<std::size_t>(d)] = terms[static_cast<std::size_t>(l)]; },
        [&](int dst, int src) { slots[static_cast<std::size_t>(dst)] += slots[static_cast<std::size_t>(src)]; });
    std::vector<float> in_place = terms;
    core::leaf_tree_sum_in_place(leaves, [&](std::int64_t l) -> float& { return in_place[static_cast<std::size_t>(l)]; });
    EXPECT_EQ(std::memcmp(&in_place[0], &slots[0], sizeof(float)), 0) << leaves << " leaves";
  }
}

void expect_error_mentions(const std::function<void()>& f, const std::string& words) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning '" << words << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(TransformerLayers, BadConfigurationsGiveClearErrors) {
  expect_error_mentions([] { MultiHeadSelfAttention<float>(6, 4); },
                        "dim 6 is not divisible by 4 heads");
  expect_error_mentions([] { MultiHeadSelfAttention<float>(6, 0); }, "must be positive");
  expect_error_mentions([] { PatchEmbedding<float>(1, 28, 28, 5, 8); },
                        "patch 5 does not divide the image 28 x 28");
  expect_error_mentions([] { PatchEmbedding<float>(1, 28, 30, 7, 8); },
                        "patch 7 does not divide the image 28 x 30");
  Sequential<float> model({1, 28, 28});
  expect_error_mentions(
      [&] { model.add(std::make_unique<PatchEmbedding<float>>(3, 28, 28, 7, 8)); },
      "samples must be [3, 28, 28]");
  model.add(std::make_unique<PatchEmbedding<float>>(1, 28, 28, 7, 8));
  expect_error_mentions([&] { model.add(std::make_unique<LayerNorm<float>>(9)); },
                        "must end in an extent of 9");
  expect_error_mentions([&] { model.add(std::make_unique<MultiHeadSelfAttention<float>>(16, 2)); },
                        "samples must be [tokens, 16]");
  expect_error_mentions([&] { model.add(std::make_unique<SelectToken<float>>(17)); },
                        "more than 17 tokens");
  model.add(std::make_unique<SelectToken<float>>(16));
  expect_error_mentions([&] { model.add(std::make_unique<SelectToken<float>>(0)); },
                        "[tokens, dim]");
}

}  // namespace
}  // namespace hpctrain::models
