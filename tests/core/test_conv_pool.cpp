// Convolution and max-pooling against direct float64 computations and finite differences.
#include "gradient_check.hpp"
#include "hpctrain/base/error.hpp"
#include "hpctrain/core/conv.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

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
