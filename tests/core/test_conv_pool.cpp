// Convolution and max-pooling against direct float64 computations and finite differences.
#include "gradient_check.hpp"
#include "hpctrain/base/error.hpp"
#include "hpctrain/core/conv.hpp"
#include "hpctrain/core/environment.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace hpctrain::core {
namespace {

using hpctrain::testing::expect_gradient_matches;
using hpctrain::testing::random_tensor;
using hpctrain::testing::weighted_sum;

Conv2dGeometry geometry(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w,
                        std::int64_t f, std::int64_t k, std::int64_t s, std::int64_t p) {
  Conv2dGeometry g;
  g.batch = n; g.in_channels = c; g.height = h; g.width = w;
  g.out_channels = f; g.kernel = k; g.stride = s; g.pad = p;
  return g;
}

/// Direct convolution in double on the host.
template <class T>
std::vector<double> direct_conv(const Conv2dGeometry& g, const std::vector<T>& x,
                                const std::vector<T>& w, const std::vector<T>& b) {
  const std::int64_t Ho = g.out_height(), Wo = g.out_width(), C = g.in_channels, K = g.kernel;
  std::vector<double> y(static_cast<std::size_t>(g.batch * g.out_channels * Ho * Wo));
  for (std::int64_t n = 0; n < g.batch; ++n)
    for (std::int64_t f = 0; f < g.out_channels; ++f)
      for (std::int64_t oh = 0; oh < Ho; ++oh)
        for (std::int64_t ow = 0; ow < Wo; ++ow) {
          double s = b[f];
          for (std::int64_t c = 0; c < C; ++c)
            for (std::int64_t kh = 0; kh < K; ++kh)
              for (std::int64_t kw = 0; kw < K; ++kw) {
                const std::int64_t h = oh * g.stride - g.pad + kh, ww = ow * g.stride - g.pad + kw;
                if (h < 0 || h >= g.height || ww < 0 || ww >= g.width) continue;
                s += static_cast<double>(x[((n * C + c) * g.height + h) * g.width + ww]) *
                     static_cast<double>(w[((f * C + c) * K + kh) * K + kw]);
              }
          y[((n * g.out_channels + f) * Ho + oh) * Wo + ow] = s;
        }
  return y;
}

template <class T>
void check_conv_forward(const Conv2dGeometry& g, double tol) {
  const auto x = random_tensor<T>("x", {g.batch, g.in_channels, g.height, g.width}, 41);
  const auto w = random_tensor<T>("w", {g.out_channels, g.col_rows()}, 42);
  const auto b = random_tensor<T>("b", {g.out_channels}, 43);
  auto y = make_tensor<T>("y", {g.batch, g.out_channels, g.out_height(), g.out_width()});
  Conv2dWorkspace<T> ws;
  conv2d_forward(g, x.data, w.data, b.data, ws, y.data);
  const auto want = direct_conv(g, to_host(x.data), to_host(w.data), to_host(b.data));
  const auto got = to_host(y.data);
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], tol) << i;
}

TEST(Conv2d, ForwardMatchesDirectFloat64Convolution) {
  // (N, C, H, W, F, K, stride, pad): odd sizes, stride 2, padding larger than needed, 1x1.
  for (const auto& g : {geometry(2, 3, 7, 5, 4, 3, 1, 1), geometry(1, 1, 9, 9, 2, 5, 2, 2),
                        geometry(3, 2, 6, 8, 5, 3, 2, 0), geometry(2, 4, 5, 5, 3, 1, 1, 0),
                        geometry(1, 2, 4, 3, 1, 3, 1, 2)}) {
    check_conv_forward<double>(g, 1e-12);
    // float: at most C K^2 = 50 products of values in [-1, 1]; 1e-5 absolute covers rounding.
    check_conv_forward<float>(g, 1e-5);
  }
}

TEST(Conv2d, BackwardMatchesFiniteDifferences) {
  for (const auto& g : {geometry(2, 2, 5, 4, 3, 3, 1, 1), geometry(1, 2, 7, 6, 2, 3, 2, 0)}) {
    const auto x = random_tensor<double>("x", {g.batch, g.in_channels, g.height, g.width}, 51);
    const auto w = random_tensor<double>("w", {g.out_channels, g.col_rows()}, 52);
    const auto b = random_tensor<double>("b", {g.out_channels}, 53);
    const Shape y_shape{g.batch, g.out_channels, g.out_height(), g.out_width()};
    auto y = make_tensor<double>("y", y_shape);
    const auto r = hpctrain::testing::random_values<double>(
        static_cast<std::size_t>(shape_size(y_shape)), 54);
    const auto dy = tensor_from_host<double>("dy", y_shape, r);
    Conv2dWorkspace<double> ws;
    conv2d_forward(g, x.data, w.data, b.data, ws, y.data);
    auto dw = make_tensor<double>("dw", w.shape);
    auto db = make_tensor<double>("db", b.shape);
    fill(db.data, 0.5);  // gradients accumulate: the 0.5 must survive
    auto dx = make_tensor<double>("dx", x.shape);
    conv2d_backward(g, w.data, dy.data, ws, dw.data, db.data, dx.data);
    auto db_h = to_host(db.data);
    for (auto& v : db_h) v -= 0.5;
    Conv2dWorkspace<double> ws2;
    const auto loss = [&] {
      conv2d_forward(g, x.data, w.data, b.data, ws2, y.data);
      return weighted_sum(y, r);
    };
    expect_gradient_matches("conv dx", x.data, to_host(dx.data), loss);
    expect_gradient_matches("conv dw", w.data, to_host(dw.data), loss);
    expect_gradient_matches("conv db", b.data, db_h, loss);
  }
}

/// dL/dx, dL/dw, dL/db of L = sum(dy * y) in double on the host: the forward's loop nest with
/// every product scattered into the gradients (independent of both implementations).
struct DirectGradients {
  std::vector<double> dx, dw, db;
};

template <class T>
DirectGradients direct_conv_backward(const Conv2dGeometry& g, const std::vector<T>& x,
                                     const std::vector<T>& w, const std::vector<T>& dy) {
  const std::int64_t Ho = g.out_height(), Wo = g.out_width(), C = g.in_channels, K = g.kernel;
  DirectGradients r{std::vector<double>(x.size()), std::vector<double>(w.size()),
                    std::vector<double>(static_cast<std::size_t>(g.out_channels))};
  for (std::int64_t n = 0; n < g.batch; ++n)
    for (std::int64_t f = 0; f < g.out_channels; ++f)
      for (std::int64_t oh = 0; oh < Ho; ++oh)
        for (std::int64_t ow = 0; ow < Wo; ++ow) {
          const double d = dy[((n * g.out_channels + f) * Ho + oh) * Wo + ow];
          r.db[f] += d;
          for (std::int64_t c = 0; c < C; ++c)
            for (std::int64_t kh = 0; kh < K; ++kh)
              for (std::int64_t kw = 0; kw < K; ++kw) {
                const std::int64_t h = oh * g.stride - g.pad + kh, ww = ow * g.stride - g.pad + kw;
                if (h < 0 || h >= g.height || ww < 0 || ww >= g.width) continue;
                const std::size_t xi = ((n * C + c) * g.height + h) * g.width + ww;
                const std::size_t wi = ((f * C + c) * K + kh) * K + kw;
                r.dx[xi] += d * static_cast<double>(w[wi]);
                r.dw[wi] += d * static_cast<double>(x[xi]);
              }
        }
  return r;
}

/// Runs a test body with the float convolutions on one backend, restoring the previous one.
class ConvBackendScope {
 public:
  explicit ConvBackendScope(ConvBackend b) : saved_(conv_backend()) { set_conv_backend(b); }
  ~ConvBackendScope() { set_conv_backend(saved_); }
  ConvBackendScope(const ConvBackendScope&) = delete;
  ConvBackendScope& operator=(const ConvBackendScope&) = delete;

 private:
  ConvBackend saved_;
};

class Conv2dFloat : public ::testing::TestWithParam<ConvBackend> {
 protected:
  void SetUp() override {
    if (GetParam() == ConvBackend::onednn && !onednn_available()) GTEST_SKIP() << "no oneDNN in this build";
  }
};

/// Float forward and backward on one backend against direct float64 computations, on odd
/// shapes (batch 1, 3, 7; channels 1, 3, 17; non-square images; strides 1 and 2; padding 0..2;
/// kernels 1, 3, 5), twice per workspace (the second call reuses the cached primitives), with
/// gradients accumulated on top of non-zero values as the contract says.
TEST_P(Conv2dFloat, ForwardAndBackwardMatchFloat64References) {
  ConvBackendScope scope(GetParam());
  for (const auto& g : {geometry(1, 1, 28, 28, 32, 5, 1, 2), geometry(3, 3, 7, 5, 17, 3, 1, 1),
                        geometry(7, 17, 9, 6, 3, 5, 2, 2), geometry(3, 17, 14, 11, 16, 1, 1, 0),
                        geometry(1, 3, 5, 8, 1, 3, 2, 0), geometry(7, 32, 14, 14, 64, 5, 1, 2)}) {
    SCOPED_TRACE(::testing::Message() << "N" << g.batch << " C" << g.in_channels << " " << g.height
                                      << "x" << g.width << " F" << g.out_channels << " K" << g.kernel
                                      << " S" << g.stride << " P" << g.pad);
    const auto x = random_tensor<float>("x", {g.batch, g.in_channels, g.height, g.width}, 71);
    const auto w = random_tensor<float>("w", {g.out_channels, g.col_rows()}, 72);
    const auto b = random_tensor<float>("b", {g.out_channels}, 73);
    const Shape y_shape{g.batch, g.out_channels, g.out_height(), g.out_width()};
    const auto dy = random_tensor<float>("dy", y_shape, 74);
    const auto want_y = direct_conv(g, to_host(x.data), to_host(w.data), to_host(b.data));
    const auto want = direct_conv_backward(g, to_host(x.data), to_host(w.data), to_host(dy.data));
    // float: sums of up to C K^2 (forward, dx) or N Ho Wo (dw, db) products of values in
    // [-1, 1]; relative 1e-5 of the sum's magnitude bound covers any summation order.
    const double fwd_tol = 1e-5 * static_cast<double>(g.col_rows());
    const double dw_tol = 1e-5 * static_cast<double>(g.batch * g.out_height() * g.out_width());
    const double dx_tol = 1e-5 * static_cast<double>(g.out_channels * g.kernel * g.kernel);
    Conv2dWorkspace<float> ws;
    auto y = make_tensor<float>("y", y_shape);
    auto dw = make_tensor<float>("dw", w.shape);
    auto db = make_tensor<float>("db", b.shape);
    auto dx = make_tensor<float>("dx", x.shape);
    for (int round = 1; round <= 2; ++round) {
      conv2d_forward(g, x.data, w.data, b.data, ws, y.data);
      EXPECT_EQ(ws.forward_backend, GetParam());
      const auto got_y = to_host(y.data);
      for (std::size_t i = 0; i < got_y.size(); ++i) ASSERT_NEAR(got_y[i], want_y[i], fwd_tol) << i;
      conv2d_backward(g, w.data, dy.data, ws, dw.data, db.data, dx.data);
      const auto got_dx = to_host(dx.data), got_dw = to_host(dw.data), got_db = to_host(db.data);
      for (std::size_t i = 0; i < got_dx.size(); ++i) ASSERT_NEAR(got_dx[i], want.dx[i], dx_tol) << "dx " << i;
      // dw and db accumulate: after round r they hold r times the gradient.
      for (std::size_t i = 0; i < got_dw.size(); ++i) ASSERT_NEAR(got_dw[i], round * want.dw[i], round * dw_tol) << "dw " << i;
      for (std::size_t i = 0; i < got_db.size(); ++i) ASSERT_NEAR(got_db[i], round * want.db[i], round * dw_tol) << "db " << i;
    }
    // Without an input gradient (the first layer) dw and db still accumulate.
    conv2d_forward(g, x.data, w.data, b.data, ws, y.data);
    conv2d_backward(g, w.data, dy.data, ws, dw.data, db.data, Vec<float>());
    const auto got_db = to_host(db.data);
    for (std::size_t i = 0; i < got_db.size(); ++i) ASSERT_NEAR(got_db[i], 3 * want.db[i], 3 * dw_tol) << "db " << i;
  }
}

/// A workspace follows the batch size (the last partial batch of an epoch) and back.
TEST_P(Conv2dFloat, WorkspaceFollowsBatchSize) {
  ConvBackendScope scope(GetParam());
  Conv2dWorkspace<float> ws;
  for (const std::int64_t n : {4, 3, 4}) {
    const auto g = geometry(n, 2, 6, 5, 3, 3, 1, 1);
    const auto x = random_tensor<float>("x", {g.batch, g.in_channels, g.height, g.width}, 81);
    const auto w = random_tensor<float>("w", {g.out_channels, g.col_rows()}, 82);
    const auto b = random_tensor<float>("b", {g.out_channels}, 83);
    auto y = make_tensor<float>("y", {g.batch, g.out_channels, g.out_height(), g.out_width()});
    conv2d_forward(g, x.data, w.data, b.data, ws, y.data);
    const auto want = direct_conv(g, to_host(x.data), to_host(w.data), to_host(b.data));
    const auto got = to_host(y.data);
    for (std::size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-4) << "N" << n << " " << i;
  }
}

/// Elements [first, first + count) of a host vector as a tensor of `shape`.
Tensor<float> host_slice(const std::vector<float>& v, std::int64_t first, std::int64_t count, const Shape& shape) {
  return tensor_from_host<float>("slice", shape, std::vector<float>(v.begin() + first, v.begin() + first + count));
}

/// The pairwise tree coll::TreeSum adds micro-shard terms over: node (l, i) = node (l-1, 2i) +
/// node (l-1, 2i+1), or the left child alone where the right one has no leaf.
std::vector<float> pairwise_tree(std::vector<std::vector<float>> nodes) {
  while (nodes.size() > 1) {
    std::vector<std::vector<float>> up;
    for (std::size_t i = 0; i < nodes.size(); i += 2) {
      up.push_back(nodes[i]);
      if (i + 1 < nodes.size()) {
        for (std::size_t e = 0; e < up.back().size(); ++e) up.back()[e] += nodes[i + 1][e];
      }
    }
    nodes = std::move(up);
  }
  return nodes[0];
}

std::size_t differing(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return std::max(a.size(), b.size());
  std::size_t n = 0;
  for (std::size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return n;
}

// conv2d_forward_in_leaves / conv2d_backward_in_leaves (deterministic training's grouped passes):
// every output row and input-gradient row has the bits of conv2d_forward / conv2d_backward on
// its leaf's rows alone, and dw, db gain the pairwise tree of the leaves' gradients (each added
// into zeros, as a pass per leaf gives them), bit for bit: the CNN's two convolutions with a
// short last leaf, a strided odd shape in leaves of 3, fewer rows than a leaf; at 1 and 2
// threads, held (deterministic training: oneDNN on one thread, the leaves side by side on the
// held threads) and not; twice per workspace; near float64.
TEST_P(Conv2dFloat, LeavesHaveTheBitsOfTheirRowsAlone) {
  ConvBackendScope scope(GetParam());
  const int threads_before = std::max(1, blas_threads());
  for (const auto& [g, leaf] : std::vector<std::tuple<Conv2dGeometry, std::int64_t>>{
           {geometry(50, 1, 28, 28, 32, 5, 1, 2), 16}, {geometry(20, 32, 14, 14, 64, 5, 1, 2), 8},
           {geometry(10, 3, 9, 6, 5, 3, 2, 1), 3}, {geometry(5, 2, 6, 5, 3, 3, 1, 1), 16}}) {
    const std::int64_t in_row = g.in_channels * g.height * g.width;
    const std::int64_t out_row = g.out_channels * g.out_height() * g.out_width();
    const std::int64_t nw = g.out_channels * g.col_rows(), leaves = (g.batch + leaf - 1) / leaf;
    const Shape x_shape{g.batch, g.in_channels, g.height, g.width};
    const Shape y_shape{g.batch, g.out_channels, g.out_height(), g.out_width()};
    const auto x = random_tensor<float>("x", x_shape, 91);
    const auto w = random_tensor<float>("w", {g.out_channels, g.col_rows()}, 92);
    const auto b = random_tensor<float>("b", {g.out_channels}, 93);
    const auto dy = random_tensor<float>("dy", y_shape, 94);
    const auto dw0 = random_tensor<float>("dw0", {g.out_channels, g.col_rows()}, 95);  // dw accumulates
    const auto db0 = random_tensor<float>("db0", {g.out_channels}, 96);
    const auto hx = to_host(x.data), hdy = to_host(dy.data);
    const auto want_y = direct_conv(g, hx, to_host(w.data), to_host(b.data));
    const auto want = direct_conv_backward(g, hx, to_host(w.data), hdy);
    for (const bool held : {false, true}) {
      for (const int threads : {1, 2}) {
        set_blas_threads(threads);
        std::optional<SingleThreadedLibraries> single;
        if (held) single.emplace();
        SCOPED_TRACE(::testing::Message() << "N" << g.batch << " C" << g.in_channels << " F" << g.out_channels
                                          << " K" << g.kernel << " S" << g.stride << ", leaves of " << leaf << ", "
                                          << threads << " threads" << (held ? ", held" : ""));
        // the references: one call per leaf, each gradient into zeros, then the tree
        std::vector<float> y_want, dx_want;
        std::vector<std::vector<float>> leaf_grads;
        for (std::int64_t l = 0; l < leaves; ++l) {
          Conv2dGeometry lg = g;
          lg.batch = std::min(leaf, g.batch - l * leaf);
          Conv2dWorkspace<float> ws;
          const auto xl = host_slice(hx, l * leaf * in_row, lg.batch * in_row, {lg.batch, g.in_channels, g.height, g.width});
          const auto dyl = host_slice(hdy, l * leaf * out_row, lg.batch * out_row, {lg.batch, g.out_channels, g.out_height(), g.out_width()});
          auto yl = make_tensor<float>("yl", dyl.shape);
          auto dxl = make_tensor<float>("dxl", xl.shape);
          auto dwl = make_tensor<float>("dwl", w.shape);
          auto dbl = make_tensor<float>("dbl", b.shape);
          conv2d_forward(lg, xl.data, w.data, b.data, ws, yl.data);
          conv2d_backward(lg, w.data, dyl.data, ws, dwl.data, dbl.data, dxl.data);
          for (const float v : to_host(yl.data)) y_want.push_back(v);
          for (const float v : to_host(dxl.data)) dx_want.push_back(v);
          leaf_grads.push_back(to_host(dwl.data));
          for (const float v : to_host(dbl.data)) leaf_grads.back().push_back(v);
        }
        std::vector<float> grad_want = pairwise_tree(leaf_grads);
        const auto hdw0 = to_host(dw0.data), hdb0 = to_host(db0.data);
        for (std::int64_t i = 0; i < nw; ++i) grad_want[i] = hdw0[i] + grad_want[i];
        for (std::int64_t f = 0; f < g.out_channels; ++f) grad_want[nw + f] = hdb0[f] + grad_want[nw + f];
        // in leaves, twice per workspace (the second reuses each leaf's primitives)
        Conv2dLeaves<float> ws;
        for (int round = 1; round <= 2; ++round) {
          auto y = make_tensor<float>("y", y_shape);
          auto dx = make_tensor<float>("dx", x_shape);
          const auto dw = tensor_from_host<float>("dw", w.shape, hdw0);
          const auto db = tensor_from_host<float>("db", b.shape, hdb0);
          conv2d_forward_in_leaves(leaf, g, x.data, w.data, b.data, ws, y.data);
          conv2d_backward_in_leaves(leaf, g, w.data, dy.data, ws, dw.data, db.data, dx.data);
          EXPECT_EQ(differing(to_host(y.data), y_want), 0u) << "y, round " << round;
          EXPECT_EQ(differing(to_host(dx.data), dx_want), 0u) << "dx, round " << round;
          std::vector<float> grad = to_host(dw.data);
          for (const float v : to_host(db.data)) grad.push_back(v);
          ASSERT_EQ(differing(grad, grad_want), 0u) << "dw, db: the tree of the leaves' gradients, round " << round;
          if (round == 2) {  // near float64 (the tree's terms are the leaves' float sums)
            const auto got_y = to_host(y.data), got_dx = to_host(dx.data);
            for (std::size_t i = 0; i < got_y.size(); ++i) ASSERT_NEAR(got_y[i], want_y[i], 1e-5 * g.col_rows()) << i;
            for (std::size_t i = 0; i < got_dx.size(); ++i) ASSERT_NEAR(got_dx[i], want.dx[i], 1e-5 * nw) << i;
            const double tol = 1e-5 * static_cast<double>(g.batch * g.out_height() * g.out_width());
            for (std::int64_t i = 0; i < nw; ++i) ASSERT_NEAR(grad[i] - hdw0[i], want.dw[i], tol) << "dw " << i;
            for (std::int64_t f = 0; f < g.out_channels; ++f) ASSERT_NEAR(grad[nw + f] - hdb0[f], want.db[f], tol) << "db " << f;
          }
        }
        // Without an input gradient (the first layer) the parameter gradients are the same.
        const auto dw = tensor_from_host<float>("dw", w.shape, hdw0);
        const auto db = tensor_from_host<float>("db", b.shape, hdb0);
        auto y = make_tensor<float>("y", y_shape);
        conv2d_forward_in_leaves(leaf, g, x.data, w.data, b.data, ws, y.data);
        conv2d_backward_in_leaves(leaf, g, w.data, dy.data, ws, dw.data, db.data, Vec<float>());
        std::vector<float> grad = to_host(dw.data);
        for (const float v : to_host(db.data)) grad.push_back(v);
        EXPECT_EQ(differing(grad, grad_want), 0u) << "dw, db without dx";
      }
    }
  }
  // A leaf's oneDNN state run by another thread than the one that created it: the forward with
  // the held team at one thread (the states made on this thread), the backward at two (the leaves
  // side by side, so the other thread runs states it did not make). With oneDNN's default
  // scratchpad, which belongs to the creating thread, this failed ("could not execute a
  // primitive"): conv1's data gradient, oneDNN's gemm kernel on a plain layout, needs a few
  // MB of scratchpad at this image size.
  {
    const auto g = geometry(8, 1, 160, 160, 8, 5, 1, 2);
    const auto x = random_tensor<float>("x", {g.batch, g.in_channels, g.height, g.width}, 101);
    const auto w = random_tensor<float>("w", {g.out_channels, g.col_rows()}, 102);
    const auto b = random_tensor<float>("b", {g.out_channels}, 103);
    const auto dy = random_tensor<float>("dy", {g.batch, g.out_channels, g.out_height(), g.out_width()}, 104);
    std::vector<std::vector<float>> results;
    for (const int backward_threads : {1, 2}) {
      Conv2dLeaves<float> ws;
      auto y = make_tensor<float>("y", dy.shape);
      auto dx = make_tensor<float>("dx", x.shape);
      auto dw = make_tensor<float>("dw", w.shape), db = make_tensor<float>("db", b.shape);
      set_blas_threads(1);
      {
        const SingleThreadedLibraries single;
        conv2d_forward_in_leaves(2, g, x.data, w.data, b.data, ws, y.data);
      }
      set_blas_threads(backward_threads);
      const SingleThreadedLibraries single;
      ASSERT_NO_THROW(conv2d_backward_in_leaves(2, g, w.data, dy.data, ws, dw.data, db.data, dx.data))
          << backward_threads << " threads";
      results.push_back(to_host(dx.data));
      for (const float v : to_host(dw.data)) results.back().push_back(v);
    }
    EXPECT_EQ(differing(results[0], results[1]), 0u) << "the backward on one thread and side by side";
  }
  set_blas_threads(threads_before);
  // The pairwise tree is not the plain sum here: the comparison can tell them apart.
  const auto g = geometry(64, 1, 28, 28, 32, 5, 1, 2);
  const auto x = random_tensor<float>("x", {g.batch, 1, 28, 28}, 97);
  const auto w = random_tensor<float>("w", {g.out_channels, g.col_rows()}, 98);
  const auto b = random_tensor<float>("b", {g.out_channels}, 99);
  const auto dy = random_tensor<float>("dy", {g.batch, g.out_channels, 28, 28}, 100);
  auto y = make_tensor<float>("y", dy.shape);
  auto dw_leaves = make_tensor<float>("dw", w.shape), db_leaves = make_tensor<float>("db", b.shape);
  auto dw_plain = make_tensor<float>("dw", w.shape), db_plain = make_tensor<float>("db", b.shape);
  Conv2dLeaves<float> leaves;
  conv2d_forward_in_leaves(16, g, x.data, w.data, b.data, leaves, y.data);
  conv2d_backward_in_leaves(16, g, w.data, dy.data, leaves, dw_leaves.data, db_leaves.data, Vec<float>());
  Conv2dWorkspace<float> plain;
  conv2d_forward(g, x.data, w.data, b.data, plain, y.data);
  conv2d_backward(g, w.data, dy.data, plain, dw_plain.data, db_plain.data, Vec<float>());
  EXPECT_GT(differing(to_host(dw_leaves.data), to_host(dw_plain.data)), 0u) << "the tree and the plain sum agree";
  // misuse: no rows per leaf; a backward before any forward in leaves
  Conv2dLeaves<float> fresh;
  EXPECT_THROW(conv2d_forward_in_leaves(0, g, x.data, w.data, b.data, fresh, y.data), Error);
  EXPECT_THROW(conv2d_backward_in_leaves(16, g, w.data, dy.data, fresh, dw_plain.data, db_plain.data, Vec<float>()), Error);
}

INSTANTIATE_TEST_SUITE_P(Backends, Conv2dFloat,
                         ::testing::Values(ConvBackend::portable, ConvBackend::onednn),
                         [](const ::testing::TestParamInfo<ConvBackend>& info) {
                           return std::string(conv_backend_name(info.param));
                         });

TEST(Conv2dBackend, EnvironmentAndBuildDecideTheDefault) {
  // conv_backend() reads HPCTRAIN_CONV_BACKEND once; here it is unset (ctest sets nothing).
  if (std::getenv("HPCTRAIN_CONV_BACKEND") == nullptr) {  // NOLINT
    EXPECT_EQ(conv_backend(), onednn_available() ? ConvBackend::onednn : ConvBackend::portable);
  }
  if (!onednn_available()) {
    EXPECT_THROW(set_conv_backend(ConvBackend::onednn), Error);
  }
}

TEST(Conv2d, RejectsBadGeometry) {
  EXPECT_THROW(geometry(1, 1, 2, 2, 1, 5, 1, 0).validate(), Error);
  EXPECT_THROW(geometry(1, 0, 4, 4, 1, 3, 1, 0).validate(), Error);
  Conv2dWorkspace<float> ws;
  Vec<float> v("v", 16);
  EXPECT_THROW(conv2d_forward(geometry(1, 1, 4, 4, 1, 3, 1, 0), v, v, v, ws, v), Error);
}

Pool2dGeometry pool(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w,
                    std::int64_t k, std::int64_t s) {
  Pool2dGeometry g;
  g.batch = n; g.channels = c; g.height = h; g.width = w; g.kernel = k; g.stride = s;
  return g;
}

TEST(MaxPool2d, ForwardMatchesNaiveAndBackwardMatchesFiniteDifferences) {
  // 2x2/2 on an odd size (last row and column dropped) and overlapping 3x3/2 windows.
  // 2x2/2 on an odd size (the fast path), overlapping 3x3/2 windows (atomics), disjoint 3x3/3.
  for (const auto& g : {pool(2, 3, 7, 6, 2, 2), pool(1, 2, 7, 7, 3, 2), pool(3, 2, 9, 8, 3, 3)}) {
    const Shape xs{g.batch, g.channels, g.height, g.width};
    const Shape ys{g.batch, g.channels, g.out_height(), g.out_width()};
    const auto x = random_tensor<double>("x", xs, 61);
    auto y = make_tensor<double>("y", ys);
    Kokkos::View<std::int64_t*, MemSpace> argmax("argmax", static_cast<std::size_t>(shape_size(ys)));
    maxpool2d_forward(g, x.data, y.data, argmax);
    const auto hx = to_host(x.data), hy = to_host(y.data);
    for (std::int64_t nc = 0; nc < g.batch * g.channels; ++nc)
      for (std::int64_t oh = 0; oh < g.out_height(); ++oh)
        for (std::int64_t ow = 0; ow < g.out_width(); ++ow) {
          double m = -1e300;
          for (std::int64_t kh = 0; kh < g.kernel; ++kh)
            for (std::int64_t kw = 0; kw < g.kernel; ++kw)
              m = std::max(m, hx[(nc * g.height + oh * g.stride + kh) * g.width + ow * g.stride + kw]);
          EXPECT_EQ(hy[(nc * g.out_height() + oh) * g.out_width() + ow], m);
        }
    const auto r = hpctrain::testing::random_values<double>(static_cast<std::size_t>(shape_size(ys)), 62);
    const auto dy = tensor_from_host<double>("dy", ys, r);
    auto dx = make_tensor<double>("dx", xs);
    maxpool2d_backward(g, dy.data, argmax, dx.data);
    expect_gradient_matches("maxpool dx", x.data, to_host(dx.data), [&] {
      maxpool2d_forward(g, x.data, y.data, argmax);
      return weighted_sum(y, r);
    });
  }
}

TEST(MaxPool2d, TiesGoToTheFirstElementOfTheWindow) {
  for (const auto& g : {pool(1, 2, 4, 6, 2, 2), pool(1, 1, 6, 6, 3, 3), pool(1, 1, 5, 5, 3, 2)}) {
    const Shape xs{g.batch, g.channels, g.height, g.width};
    const Shape ys{g.batch, g.channels, g.out_height(), g.out_width()};
    const auto x = make_tensor<double>("x", xs);  // all zeros: every window is one big tie
    auto y = make_tensor<double>("y", ys);
    Kokkos::View<std::int64_t*, MemSpace> argmax("argmax", static_cast<std::size_t>(shape_size(ys)));
    maxpool2d_forward(g, x.data, y.data, argmax);
    const auto am = to_host(argmax);
    for (std::int64_t nc = 0; nc < g.batch * g.channels; ++nc)
      for (std::int64_t oh = 0; oh < g.out_height(); ++oh)
        for (std::int64_t ow = 0; ow < g.out_width(); ++ow)
          EXPECT_EQ(am[(nc * g.out_height() + oh) * g.out_width() + ow],
                    (nc * g.height + oh * g.stride) * g.width + ow * g.stride);
  }
}

}  // namespace
}  // namespace hpctrain::core
