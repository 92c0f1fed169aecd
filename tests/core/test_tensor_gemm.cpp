// Tensors and gemm: gemm against a naive float64 product on odd shapes, every transpose pair.
#include "gemm_backend_scope.hpp"
#include "gradient_check.hpp"
#include "hpctrain/base/error.hpp"
#include "hpctrain/core/conv.hpp"
#include "hpctrain/core/environment.hpp"
#include "hpctrain/core/gemm.hpp"
#include "hpctrain/core/leaf_tree.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <tuple>

namespace hpctrain::core {
namespace {

using hpctrain::testing::all_gemm_backends;
using hpctrain::testing::gemm_backend_built;
using hpctrain::testing::GemmBackendScope;
using hpctrain::testing::random_values;

TEST(Tensor, ShapeMustMatchStorage) {
  EXPECT_THROW(Tensor<float>(Vec<float>("v", 6), {2, 4}), Error);
  const Tensor<float> t(Vec<float>("v", 6), {2, 3});
  EXPECT_EQ(t.dim(-1), 3);
  EXPECT_EQ(t.reshaped({3, 2}).data.data(), t.data.data());
  EXPECT_THROW(t.reshaped({4, 2}), Error);
  EXPECT_THROW(t.dim(2), Error);
}

TEST(Tensor, EnsureShapeReusesStorageOfTheSameSize) {
  Tensor<float> t = make_tensor<float>("t", {2, 3});
  const float* before = t.data.data();
  ensure_shape(t, "t", {3, 2});
  EXPECT_EQ(t.data.data(), before);
  EXPECT_EQ(t.shape, (Shape{3, 2}));
  ensure_shape(t, "t", {4, 2});
  EXPECT_EQ(t.size(), 8);
  EXPECT_EQ(t.data.label(), "t");
}

// A batch gathered from a table in memory: rows in the order asked (repeats allowed), the same
// bytes as copying each row, at one and two threads (large enough to run on the team), and a
// clear error for a destination of the wrong size.
TEST(Tensor, GatherRowsCopiesTheRowsAskedInOrderAtAnyThreadCount) {
  const std::int64_t table_rows = 300, width = 131;  // 131 floats: rows not 64-byte aligned
  const std::vector<float> table = random_values<float>(table_rows * width, 5);
  const int threads_before = std::max(1, blas_threads());
  for (const std::int64_t count : {std::int64_t{0}, std::int64_t{1}, std::int64_t{7}, std::int64_t{400}}) {
    std::vector<std::int64_t> rows;
    for (std::int64_t k = 0; k < count; ++k) rows.push_back((k * 97 + 13) % table_rows);
    if (count > 2) rows[2] = rows[1];  // a repeat
    std::vector<float> want;
    for (const std::int64_t r : rows) want.insert(want.end(), table.begin() + r * width, table.begin() + (r + 1) * width);
    for (const int threads : {1, 2}) {
      set_blas_threads(threads);
      const Vec<float> v("gathered", static_cast<std::size_t>(count * width));
      fill(v, -1.0F);
      gather_rows_from_host(v, table.data(), width, rows.data(), count);
      const std::vector<float> got = to_host(v);
      ASSERT_EQ(got.size(), want.size());
      // (memcmp may not be given the null data() of an empty vector)
      EXPECT_TRUE(got.empty() || std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0)
          << count << " rows at " << threads << " threads";
    }
  }
  set_blas_threads(threads_before);
  const std::int64_t two[2] = {0, 1};
  try {
    gather_rows_from_host(Vec<float>("short", 10), table.data(), width, two, 2);
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("2 rows of 131 for a View of 10"), std::string::npos) << e.what();
  }
}

TEST(Tensor, HostRoundTripAndConvert) {
  const std::vector<float> h{1.5f, -2.f, 3.25f};
  const Tensor<float> t = tensor_from_host<float>("t", {3}, h);
  EXPECT_EQ(to_host(t.data), h);
  const Tensor<double> d = convert<double>(t, "d");
  EXPECT_EQ(to_host(d.data), (std::vector<double>{1.5, -2.0, 3.25}));
}

template <class T>
void check_gemm(std::int64_t m, std::int64_t n, std::int64_t k, Trans ta, Trans tb, double alpha,
                double beta, double tol) {
  const std::int64_t a_rows = ta == Trans::yes ? k : m, a_cols = ta == Trans::yes ? m : k;
  const std::int64_t b_rows = tb == Trans::yes ? n : k, b_cols = tb == Trans::yes ? k : n;
  const auto ha = random_values<T>(static_cast<std::size_t>(m * k), 1);
  const auto hb = random_values<T>(static_cast<std::size_t>(k * n), 2);
  const auto hc = random_values<T>(static_cast<std::size_t>(m * n), 3);
  const auto a = tensor_from_host<T>("a", {a_rows, a_cols}, ha);
  const auto b = tensor_from_host<T>("b", {b_rows, b_cols}, hb);
  const auto c = tensor_from_host<T>("c", {m, n}, hc);
  gemm(ta, tb, static_cast<T>(alpha), as_matrix(a.data, a_rows, a_cols),
       as_matrix(b.data, b_rows, b_cols), static_cast<T>(beta), as_matrix(c.data, m, n));
  const std::vector<T> got = to_host(c.data);
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      double s = 0.0;
      for (std::int64_t p = 0; p < k; ++p) {
        const double av = ta == Trans::yes ? ha[p * a_cols + i] : ha[i * a_cols + p];
        const double bv = tb == Trans::yes ? hb[j * b_cols + p] : hb[p * b_cols + j];
        s += av * bv;
      }
      const double want = alpha * s + beta * static_cast<double>(hc[i * n + j]);
      ASSERT_NEAR(got[i * n + j], want, tol * (1.0 + std::fabs(want)))
          << "m=" << m << " n=" << n << " k=" << k << " at " << i << "," << j;
    }
  }
}

struct GemmCase {
  GemmBackend backend;
  int m, n, k;
};

void PrintTo(const GemmCase& c, std::ostream* os) {
  *os << gemm_backend_name(c.backend) << "_" << c.m << "x" << c.n << "x" << c.k;
}

class GemmShapes : public ::testing::TestWithParam<GemmCase> {
 protected:
  void SetUp() override {
    if (!gemm_backend_built(GetParam().backend)) {
      GTEST_SKIP() << "this build has no " << gemm_backend_name(GetParam().backend);
    }
  }
};

TEST_P(GemmShapes, MatchesNaiveFloat64ForEveryTransposePair) {
  const GemmCase c = GetParam();
  const GemmBackendScope scope(c.backend);
  for (const Trans ta : {Trans::no, Trans::yes}) {
    for (const Trans tb : {Trans::no, Trans::yes}) {
      // float: k products of values in [-1, 1] round to ~k * 2^-24 relative; 1e-5 covers k <= 100.
      check_gemm<float>(c.m, c.n, c.k, ta, tb, 1.0, 0.0, 1e-5);
      check_gemm<float>(c.m, c.n, c.k, ta, tb, 1.0, 1.0, 1e-5);  // accumulate (weight gradient)
      check_gemm<float>(c.m, c.n, c.k, ta, tb, 1.0, 0.75, 1e-5);
      check_gemm<float>(c.m, c.n, c.k, ta, tb, -0.5, 0.75, 1e-5);
      check_gemm<double>(c.m, c.n, c.k, ta, tb, 1.25, 1.0, 1e-12);
    }
  }
}

std::vector<GemmCase> gemm_cases() {
  std::vector<GemmCase> cases;
  for (const GemmBackend b : all_gemm_backends()) {
    // {16, 300, 50} and {70, 40, 16}: wide enough for libxsmm's column split over two threads
    for (const auto& [m, n, k] : std::vector<std::tuple<int, int, int>>{{1, 1, 1},
                                                                        {7, 5, 3},
                                                                        {3, 17, 31},
                                                                        {64, 10, 33},
                                                                        {13, 1, 64},
                                                                        {1, 40, 7},
                                                                        {33, 65, 17},
                                                                        {16, 300, 50},
                                                                        {300, 70, 16}}) {
      cases.push_back({b, m, n, k});
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(OddAndSquare, GemmShapes, ::testing::ValuesIn(gemm_cases()),
                         [](const ::testing::TestParamInfo<GemmCase>& info) {
                           const GemmCase& c = info.param;
                           return std::string(gemm_backend_name(c.backend)) + "_" + std::to_string(c.m) +
                                  "x" + std::to_string(c.n) + "x" + std::to_string(c.k);
                         });

class LinearForward : public ::testing::TestWithParam<GemmBackend> {
 protected:
  void SetUp() override {
    if (!gemm_backend_built(GetParam())) GTEST_SKIP() << "no " << gemm_backend_name(GetParam());
  }
};

TEST_P(LinearForward, MatchesNaiveFloat64WithBias) {
  const GemmBackendScope scope(GetParam());
  for (const auto& [n, in, out] : std::vector<std::tuple<int, int, int>>{
           {1, 1, 1}, {3, 17, 5}, {7, 784, 10}, {64, 33, 129}, {16, 300, 257}, {300, 20, 7}}) {
    const auto hx = random_values<float>(static_cast<std::size_t>(n * in), 4);
    const auto hw = random_values<float>(static_cast<std::size_t>(out * in), 5);
    const auto hb = random_values<float>(static_cast<std::size_t>(out), 6);
    const auto x = tensor_from_host<float>("x", {n, in}, hx);
    const auto w = tensor_from_host<float>("w", {out, in}, hw);
    const auto b = tensor_from_host<float>("b", {out}, hb);
    // y starts as NaN: the forward must overwrite it, not add to it.
    const auto y = tensor_from_host<float>("y", {n, out},
                                           std::vector<float>(static_cast<std::size_t>(n * out), NAN));
    linear_forward(as_matrix(x.data, n, in), as_matrix(w.data, out, in), b.data, as_matrix(y.data, n, out));
    const auto got = to_host(y.data);
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < out; ++j) {
        double want = hb[j];
        for (int p = 0; p < in; ++p) want += static_cast<double>(hx[i * in + p]) * hw[j * in + p];
        ASSERT_NEAR(got[i * out + j], want, 1e-6 * in * (1.0 + std::fabs(want)))
            << "n=" << n << " in=" << in << " out=" << out << " at " << i << "," << j;
      }
    }
  }
  Vec<float> v("v", 64);
  EXPECT_THROW(linear_forward(as_matrix(v, 2, 3), as_matrix(v, 4, 3), Vec<float>("b", 3), as_matrix(v, 2, 4)),
               Error);
}

INSTANTIATE_TEST_SUITE_P(Backends, LinearForward, ::testing::ValuesIn(all_gemm_backends()),
                         [](const ::testing::TestParamInfo<GemmBackend>& info) {
                           return std::string(gemm_backend_name(info.param));
                         });

TEST(GemmBackendChoice, EnvironmentAndBuildDecideTheDefault) {
  // gemm_backend() reads HPCTRAIN_GEMM_BACKEND once; here it is unset (ctest sets nothing).
  if (std::getenv("HPCTRAIN_GEMM_BACKEND") == nullptr) {  // NOLINT
    EXPECT_EQ(gemm_backend(), libxsmm_available()  ? GemmBackend::libxsmm
                              : onednn_available() ? GemmBackend::onednn
                                                   : GemmBackend::blas);
  }
  if (!onednn_available()) {
    EXPECT_THROW(set_gemm_backend(GemmBackend::onednn), Error);
  }
  if (!libxsmm_available()) {
    EXPECT_THROW(set_gemm_backend(GemmBackend::libxsmm), Error);
  }
}

// Deterministic training's threads: OpenBLAS and the OpenMP runtime (oneDNN) on one thread,
// the thread-count-independent kernels on the count in force before; both restored after; a
// second one at once is refused.
TEST(SingleThreadedLibraries, HoldsTheLibrariesAtOneAndKeepsTheKernelsThreads) {
  const int before = std::max(1, blas_threads());
  set_blas_threads(2);
  ASSERT_EQ(held_kernel_threads(), 0);
  {
    const SingleThreadedLibraries single;
    EXPECT_EQ(single.kernel_threads(), 2);
    EXPECT_EQ(held_kernel_threads(), 2);
    if (blas_threads() >= 0) {  // OpenBLAS
      EXPECT_EQ(blas_threads(), 1);
      EXPECT_EQ(single.blas_threads(), 1);
    }
    std::string error = "no error";
    try {
      const SingleThreadedLibraries again;
    } catch (const Error& e) {
      error = e.what();
    }
    EXPECT_NE(error.find("one is already in force"), std::string::npos) << error;
    EXPECT_EQ(held_kernel_threads(), 2);
  }
  EXPECT_EQ(held_kernel_threads(), 0);
  if (blas_threads() >= 0) {
    EXPECT_EQ(blas_threads(), 2);
  }
  set_blas_threads(before);
}

// libxsmm splits c's columns over the rank's threads; no element's sum is split, so the bits do
// not depend on the thread count (deterministic mode and `predict` rely on it). The dense
// layers' three products at a 16-row micro-shard of the MLP and at 128 rows, 1 thread vs 2.
TEST(GemmLibxsmm, SameBitsAtOneAndTwoThreads) {
  if (!libxsmm_available()) GTEST_SKIP() << "no libxsmm";
  const int threads_before = std::max(1, blas_threads());
  const GemmBackendScope scope(GemmBackend::libxsmm);
  for (const int rows : {16, 128}) {
    const auto hx = random_values<float>(static_cast<std::size_t>(rows * 784), 7);
    const auto hw = random_values<float>(static_cast<std::size_t>(512 * 784), 8);
    const auto hb = random_values<float>(512, 9);
    const auto hdy = random_values<float>(static_cast<std::size_t>(rows * 512), 10);
    const auto x = tensor_from_host<float>("x", {rows, 784}, hx);
    const auto w = tensor_from_host<float>("w", {512, 784}, hw);
    const auto b = tensor_from_host<float>("b", {512}, hb);
    const auto dy = tensor_from_host<float>("dy", {rows, 512}, hdy);
    std::vector<std::vector<float>> runs;
    for (const int threads : {1, 2}) {
      set_blas_threads(threads);  // OpenBLAS and the OpenMP team, as the Environment sets them
      auto y = make_tensor<float>("y", {rows, 512});
      auto dx = make_tensor<float>("dx", {rows, 784});
      const auto dw = tensor_from_host<float>("dw", {512, 784}, hw);  // beta = 1 accumulates onto w's values
      linear_forward(as_matrix(x.data, rows, 784), as_matrix(w.data, 512, 784), b.data, as_matrix(y.data, rows, 512));
      gemm(Trans::no, Trans::no, 1.F, as_matrix(dy.data, rows, 512), as_matrix(w.data, 512, 784), 0.F,
           as_matrix(dx.data, rows, 784));
      gemm(Trans::yes, Trans::no, 1.F, as_matrix(dy.data, rows, 512), as_matrix(x.data, rows, 784), 1.F,
           as_matrix(dw.data, 512, 784));
      std::vector<float> all = to_host(y.data);
      for (const auto& part : {to_host(dx.data), to_host(dw.data)}) all.insert(all.end(), part.begin(), part.end());
      runs.push_back(std::move(all));
    }
    set_blas_threads(threads_before);
    ASSERT_EQ(runs[0].size(), runs[1].size());
    std::size_t first_diff = runs[0].size();
    for (std::size_t i = 0; i < runs[0].size(); ++i) {
      if (std::memcmp(&runs[0][i], &runs[1][i], sizeof(float)) != 0) {
        first_diff = i;
        break;
      }
    }
    EXPECT_EQ(first_diff, runs[0].size()) << "rows " << rows << ": first differing element (y, then dx, then dw)";
    // and the products are the products (not, say, zeros at both thread counts)
    double want = hb[3];
    for (int p = 0; p < 784; ++p) want += static_cast<double>(hx[static_cast<std::size_t>(p)]) * hw[3 * 784 + p];
    EXPECT_NEAR(runs[0][3], want, 1e-4 * (1.0 + std::fabs(want)));
  }
}

// A dense forward whose weight rows are a multiple of 1 KiB apart (the MLP's fc2: 256 x 512)
// goes to oneDNN in ordinary training; in deterministic training, which holds oneDNN at one
// thread, libxsmm computes it from a copy of the weight at a longer stride on the rank's
// threads. Its bits must still not depend on that count: held at 1 and at 2 threads, 16 and
// 128 rows (a micro-shard and a whole batch), against float64.
TEST(GemmLibxsmm, AliasingWeightInDeterministicModeSameBitsAtOneAndTwoThreads) {
  if (!libxsmm_available()) GTEST_SKIP() << "no libxsmm";
  const int threads_before = std::max(1, blas_threads());
  const GemmBackendScope scope(GemmBackend::libxsmm);
  constexpr int kIn = 512, kOut = 256;
  for (const int rows : {16, 128}) {
    const auto hx = random_values<float>(static_cast<std::size_t>(rows * kIn), 11);
    const auto hw = random_values<float>(static_cast<std::size_t>(kOut * kIn), 12);
    const auto hb = random_values<float>(kOut, 13);
    const auto x = tensor_from_host<float>("x", {rows, kIn}, hx);
    const auto w = tensor_from_host<float>("w", {kOut, kIn}, hw);
    const auto b = tensor_from_host<float>("b", {kOut}, hb);
    std::vector<std::vector<float>> runs;
    for (const int threads : {1, 2}) {
      set_blas_threads(threads);
      const SingleThreadedLibraries single;  // holds `threads` for the thread-count-independent kernels
      ASSERT_EQ(held_kernel_threads(), threads);
      auto y = make_tensor<float>("y", {rows, kOut});
      linear_forward(as_matrix(x.data, rows, kIn), as_matrix(w.data, kOut, kIn), b.data, as_matrix(y.data, rows, kOut));
      runs.push_back(to_host(y.data));
    }
    set_blas_threads(threads_before);
    ASSERT_EQ(runs[0].size(), runs[1].size());
    EXPECT_EQ(std::memcmp(runs[0].data(), runs[1].data(), runs[0].size() * sizeof(float)), 0)
        << "rows " << rows << ": the held thread count changed the bits";
    for (int i = 0; i < rows; i += 5) {
      for (int j = 0; j < kOut; j += 7) {
        double want = hb[static_cast<std::size_t>(j)];
        for (int p = 0; p < kIn; ++p) {
          want += static_cast<double>(hx[static_cast<std::size_t>(i * kIn + p)]) * hw[static_cast<std::size_t>(j * kIn + p)];
        }
        ASSERT_NEAR(runs[1][static_cast<std::size_t>(i * kOut + j)], want, 1e-4 * (1.0 + std::fabs(want)))
            << "rows " << rows << " at " << i << "," << j;
      }
    }
  }
}

/// Skips a backend this build lacks, as LinearForward does.
class LeavesGemm : public LinearForward {};

// gemm_in_leaves and linear_forward_in_leaves (deterministic training's grouped passes): each
// leaf's rows bit for bit what gemm() and linear_forward() give those rows alone, however many
// leaves the call has: the MLP's three layers at 128 rows in leaves of 16 (fc2's weight rows 1 KiB
// apart: the copied-weight path where deterministic training holds the libraries), a short last
// leaf, fewer rows than a leaf, odd shapes; 1 and 2 threads, held and not; beta 0 into NaNs and
// beta 1; near float64.
TEST_P(LeavesGemm, EachLeafHasTheBitsOfItsRowsAlone) {
  const GemmBackendScope scope(GetParam());
  const int threads_before = std::max(1, blas_threads());
  const auto rows_of = [](const Vec<float>& v, std::int64_t first, std::int64_t count, std::int64_t cols) {
    return Matrix<float>(v.data() + first * cols, static_cast<std::size_t>(count), static_cast<std::size_t>(cols));
  };
  for (const auto& [rows, in, out, leaf] : std::vector<std::tuple<int, int, int, int>>{
           {128, 784, 512, 16}, {128, 512, 256, 16}, {128, 256, 10, 16}, {40, 17, 300, 16}, {5, 3, 4, 8}, {100, 70, 33, 7}}) {
    const auto hx = random_values<float>(static_cast<std::size_t>(rows * in), 31);
    const auto hw = random_values<float>(static_cast<std::size_t>(out * in), 32);
    const auto hb = random_values<float>(static_cast<std::size_t>(out), 33);
    const auto hdy = random_values<float>(static_cast<std::size_t>(rows * out), 34);
    const auto x = tensor_from_host<float>("x", {rows, in}, hx);
    const auto w = tensor_from_host<float>("w", {out, in}, hw);
    const auto b = tensor_from_host<float>("b", {out}, hb);
    const auto dy = tensor_from_host<float>("dy", {rows, out}, hdy);
    const std::vector<float> nans_y(static_cast<std::size_t>(rows * out), NAN), nans_dx(static_cast<std::size_t>(rows * in), NAN);
    for (const bool held : {false, true}) {
      for (const int threads : {1, 2}) {
        set_blas_threads(threads);
        std::optional<SingleThreadedLibraries> single;
        if (held) single.emplace();
        const std::string where = std::to_string(rows) + " rows, " + std::to_string(in) + " -> " + std::to_string(out) +
                                  ", leaves of " + std::to_string(leaf) + ", " + std::to_string(threads) + " threads" +
                                  (held ? ", held" : "");
        // the references: one call per leaf
        const auto y_want = tensor_from_host<float>("y_want", {rows, out}, nans_y);
        const auto dx_want = tensor_from_host<float>("dx_want", {rows, in}, nans_dx);
        const auto acc_want = tensor_from_host<float>("acc_want", {rows, out}, hdy);
        for (int first = 0; first < rows; first += leaf) {
          const int count = std::min(leaf, rows - first);
          linear_forward(rows_of(x.data, first, count, in), as_matrix(w.data, out, in), b.data,
                         rows_of(y_want.data, first, count, out));
          gemm(Trans::no, Trans::no, 1.F, rows_of(dy.data, first, count, out), as_matrix(w.data, out, in), 0.F,
               rows_of(dx_want.data, first, count, in));
          gemm(Trans::no, Trans::yes, 1.F, rows_of(x.data, first, count, in), as_matrix(w.data, out, in), 1.F,
               rows_of(acc_want.data, first, count, out));
        }
        // the outputs with a leaf's rows of guard values behind them, which must stay as they are
        const std::int64_t guard_rows = leaf;  // (a lambda may not capture a structured binding in C++17)
        const auto guarded = [&](const std::vector<float>& start, std::int64_t cols) {
          std::vector<float> v = start;
          v.resize(start.size() + static_cast<std::size_t>(guard_rows * cols), 12345.F);
          return tensor_from_host<float>("guarded", {static_cast<std::int64_t>(v.size())}, v);
        };
        const auto y = guarded(nans_y, out), dx = guarded(nans_dx, in), acc = guarded(hdy, out);
        linear_forward_in_leaves<float>(leaf, as_matrix(x.data, rows, in), as_matrix(w.data, out, in), b.data,
                                        as_matrix(y.data, rows, out));
        gemm_in_leaves(leaf, Trans::no, 1.F, as_matrix(dy.data, rows, out), as_matrix(w.data, out, in), 0.F,
                       as_matrix(dx.data, rows, in));
        gemm_in_leaves(leaf, Trans::yes, 1.F, as_matrix(x.data, rows, in), as_matrix(w.data, out, in), 1.F,
                       as_matrix(acc.data, rows, out));
        auto got_y = to_host(y.data), got_dx = to_host(dx.data), got_acc = to_host(acc.data);
        for (const auto& [got, cols] : {std::pair{&got_y, out}, std::pair{&got_dx, in}, std::pair{&got_acc, out}}) {
          const auto end = static_cast<std::ptrdiff_t>(rows * cols);
          ASSERT_TRUE(std::all_of(got->begin() + end, got->end(), [](float g) { return g == 12345.F; }))
              << "written past the last row: " << where;
          got->resize(static_cast<std::size_t>(end));
        }
        ASSERT_EQ(std::memcmp(got_y.data(), to_host(y_want.data).data(), got_y.size() * sizeof(float)), 0) << "y: " << where;
        ASSERT_EQ(std::memcmp(got_dx.data(), to_host(dx_want.data).data(), got_dx.size() * sizeof(float)), 0) << "dx: " << where;
        ASSERT_EQ(std::memcmp(got_acc.data(), to_host(acc_want.data).data(), got_acc.size() * sizeof(float)), 0)
            << "beta 1: " << where;
        for (const int i : {0, rows / 2, rows - 1}) {
          for (const int j : {0, out - 1}) {
            double want = hb[static_cast<std::size_t>(j)], plus = hdy[static_cast<std::size_t>(i * out + j)];
            for (int p = 0; p < in; ++p) {
              const double term = static_cast<double>(hx[static_cast<std::size_t>(i * in + p)]) * hw[static_cast<std::size_t>(j * in + p)];
              want += term;
              plus += term;
            }
            EXPECT_NEAR(got_y[static_cast<std::size_t>(i * out + j)], want, 1e-4 * (1.0 + std::fabs(want))) << where;
            EXPECT_NEAR(got_acc[static_cast<std::size_t>(i * out + j)], plus, 1e-4 * (1.0 + std::fabs(plus))) << where;
          }
          double want = 0;
          for (int p = 0; p < out; ++p) {
            want += static_cast<double>(hdy[static_cast<std::size_t>(i * out + p)]) * hw[static_cast<std::size_t>(p * in + in - 1)];
          }
          EXPECT_NEAR(got_dx[static_cast<std::size_t>(i * in + in - 1)], want, 1e-4 * (1.0 + std::fabs(want))) << where;
        }
      }
    }
    set_blas_threads(threads_before);
  }
  const auto v = make_tensor<float>("v", {64});
  EXPECT_THROW(gemm_in_leaves(0, Trans::no, 1.F, as_matrix(v.data, 2, 3), as_matrix(v.data, 3, 3), 0.F,
                              as_matrix(v.data, 2, 3)),
               Error);
  EXPECT_THROW(linear_forward_in_leaves<float>(2, as_matrix(v.data, 4, 3), as_matrix(v.data, 3, 3), slice(v.data, 0, 3),
                                               as_matrix(v.data, 3, 3)),
               Error);
}

INSTANTIATE_TEST_SUITE_P(Backends, LeavesGemm, ::testing::ValuesIn(all_gemm_backends()),
                         [](const ::testing::TestParamInfo<GemmBackend>& info) {
                           return std::string(gemm_backend_name(info.param));
                         });

// leaf_tree_sum builds coll::TreeSum's tree: node (l, i) = left + right, the left child alone
// where the right holds no leaf. Spelled out as expressions for 1..9 leaves.
TEST(LeafTree, SumsPairwiseInTreeSumsOrder) {
  const auto tree = [](std::int64_t leaves) {
    std::vector<std::string> slots(static_cast<std::size_t>(leaf_tree_depth(leaves)));
    leaf_tree_sum(
        leaves, [&](std::int64_t l, int d) { slots.at(static_cast<std::size_t>(d)) = std::to_string(l); },
        [&](int dst, int src) {
          auto& to = slots.at(static_cast<std::size_t>(dst));
          to = "(" + to + "+" + slots.at(static_cast<std::size_t>(src)) + ")";
        });
    return slots[0];
  };
  EXPECT_EQ(tree(1), "0");
  EXPECT_EQ(tree(2), "(0+1)");
  EXPECT_EQ(tree(3), "((0+1)+2)");
  EXPECT_EQ(tree(4), "((0+1)+(2+3))");
  EXPECT_EQ(tree(5), "(((0+1)+(2+3))+4)");
  EXPECT_EQ(tree(6), "(((0+1)+(2+3))+(4+5))");
  EXPECT_EQ(tree(7), "(((0+1)+(2+3))+((4+5)+6))");
  EXPECT_EQ(tree(8), "(((0+1)+(2+3))+((4+5)+(6+7)))");
  EXPECT_EQ(tree(9), "((((0+1)+(2+3))+((4+5)+(6+7)))+8)");
  EXPECT_EQ(leaf_tree_depth(8), 4);
  EXPECT_EQ(leaf_tree_depth(9), 5);
  EXPECT_THROW(leaf_tree_sum(0, [](std::int64_t, int) {}, [](int, int) {}), Error);
}

// The overload with compute_add: the same tree, a leaf merged as soon as it is computed handed
// to compute_add (slot dst += leaf), every other leaf to compute; 1..40 leaves.
TEST(LeafTree, ComputeAddGivesTheSameTree) {
  for (std::int64_t leaves = 1; leaves <= 40; ++leaves) {
    std::vector<std::string> plain(static_cast<std::size_t>(leaf_tree_depth(leaves)));
    std::vector<std::string> fused(plain.size());
    const auto add_into = [](std::vector<std::string>& slots) {
      return [&slots](int dst, int src) {
        auto& to = slots.at(static_cast<std::size_t>(dst));
        to = "(" + to + "+" + slots.at(static_cast<std::size_t>(src)) + ")";
      };
    };
    leaf_tree_sum(
        leaves, [&](std::int64_t l, int d) { plain.at(static_cast<std::size_t>(d)) = std::to_string(l); }, add_into(plain));
    std::int64_t added = 0;
    leaf_tree_sum(
        leaves, [&](std::int64_t l, int d) { fused.at(static_cast<std::size_t>(d)) = std::to_string(l); }, add_into(fused),
        [&](std::int64_t l, int dst) {
          auto& to = fused.at(static_cast<std::size_t>(dst));
          to = "(" + to + "+" + std::to_string(l) + ")";
          ++added;
        });
    EXPECT_EQ(fused[0], plain[0]) << leaves << " leaves";
    // every right leaf of a pair, and a last leaf with a node before it
    EXPECT_EQ(added, leaves / 2 + (leaves > 1 && leaves % 2 == 1 ? 1 : 0)) << leaves << " leaves";
  }
}

/// What gemm_tn_leaf_tree must give: each leaf's a_l^T b_l by gemm() alone, added pairwise over
/// the tree, in float.
std::vector<float> leaf_tree_reference(std::int64_t leaf, std::int64_t rows, std::int64_t m, std::int64_t n,
                                       const Vec<float>& a, const Vec<float>& b) {
  const std::int64_t leaves = (rows + leaf - 1) / leaf;
  std::vector<std::vector<float>> slots(static_cast<std::size_t>(leaf_tree_depth(leaves)));
  leaf_tree_sum(
      leaves,
      [&](std::int64_t l, int d) {
        const std::int64_t r = std::min(leaf, rows - l * leaf);
        Vec<float> c("c", static_cast<std::size_t>(m * n));
        gemm(Trans::yes, Trans::no, 1.F, Matrix<float>(a.data() + l * leaf * m, r, m),
             Matrix<float>(b.data() + l * leaf * n, r, n), 0.F, as_matrix(c, m, n));
        slots[static_cast<std::size_t>(d)] = to_host(c);
      },
      [&](int dst, int src) {
        auto& to = slots[static_cast<std::size_t>(dst)];
        const auto& from = slots[static_cast<std::size_t>(src)];
        for (std::size_t i = 0; i < to.size(); ++i) to[i] += from[i];
      });
  return slots[0];
}

/// Skips a backend this build lacks, as LinearForward does.
class LeafTreeGemm : public LinearForward {};

// Bit for bit the tree of the leaves' separate products (so deterministic training's grouped
// passes equal a pass per micro-shard), and near the float64 product; shapes with a short last
// leaf, one leaf, fewer rows than a leaf, odd m and n, the MLP's fc1 (m over libxsmm's 64-row
// tiles) at 1 and 2 threads, and at 2 held (deterministic training: the leaves side by side where
// oneDNN computes them); c starts as NaN (written, not added to).
TEST_P(LeafTreeGemm, EqualsTheTreeOfSeparateProductsBitForBit) {
  const GemmBackendScope scope(GetParam());
  const int threads_before = std::max(1, blas_threads());
  for (const auto& [rows, m, n, leaf] : std::vector<std::tuple<int, int, int, int>>{
           {64, 512, 784, 16}, {128, 512, 784, 16}, {40, 17, 300, 16}, {16, 10, 256, 16}, {5, 3, 4, 8}, {100, 70, 33, 7},
           {129, 130, 65, 16}, {448, 64, 48, 16}}) {
    const auto ha = random_values<float>(static_cast<std::size_t>(rows * m), 21);
    const auto hb = random_values<float>(static_cast<std::size_t>(rows * n), 22);
    const auto a = tensor_from_host<float>("a", {rows, m}, ha);
    const auto b = tensor_from_host<float>("b", {rows, n}, hb);
    const std::vector<float> want = leaf_tree_reference(leaf, rows, m, n, a.data, b.data);
    for (const auto& [threads, held] : std::vector<std::pair<int, bool>>{{1, false}, {2, false}, {2, true}}) {
      set_blas_threads(threads);
      std::optional<SingleThreadedLibraries> single;  // held: the leaves side by side where oneDNN computes them
      if (held) single.emplace();
      const auto c = tensor_from_host<float>("c", {m, n}, std::vector<float>(static_cast<std::size_t>(m * n), NAN));
      gemm_tn_leaf_tree<float>(leaf, as_matrix(a.data, rows, m), as_matrix(b.data, rows, n), as_matrix(c.data, m, n));
      const std::vector<float> got = to_host(c.data);
      ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
          << rows << " rows, m " << m << ", n " << n << ", leaves of " << leaf << ", " << threads << " threads"
          << (held ? ", held" : "");
      for (const int i : {0, m / 2, m - 1}) {
        for (const int j : {0, n - 1}) {
          double exact = 0;
          for (int r = 0; r < rows; ++r) exact += static_cast<double>(ha[r * m + i]) * hb[r * n + j];
          EXPECT_NEAR(got[i * n + j], exact, 1e-5 * rows);
        }
      }
    }
    set_blas_threads(threads_before);
  }
  const auto v = make_tensor<float>("v", {64});
  EXPECT_THROW(gemm_tn_leaf_tree<float>(0, as_matrix(v.data, 2, 3), as_matrix(v.data, 2, 3), as_matrix(v.data, 3, 3)),
               Error);
  EXPECT_THROW(gemm_tn_leaf_tree<float>(4, as_matrix(v.data, 2, 3), as_matrix(v.data, 3, 3), as_matrix(v.data, 3, 3)),
               Error);
}

INSTANTIATE_TEST_SUITE_P(Backends, LeafTreeGemm, ::testing::ValuesIn(all_gemm_backends()),
                         [](const ::testing::TestParamInfo<GemmBackend>& info) {
                           return std::string(gemm_backend_name(info.param));
                         });

TEST(LeafTreeGemm, DoubleTakesTheGenericPath) {
  const auto ha = random_values<double>(30 * 4, 23);
  const auto hb = random_values<double>(30 * 5, 24);
  const auto a = tensor_from_host<double>("a", {30, 4}, ha);
  const auto b = tensor_from_host<double>("b", {30, 5}, hb);
  const auto c = make_tensor<double>("c", {4, 5});
  gemm_tn_leaf_tree<double>(8, as_matrix(a.data, 30, 4), as_matrix(b.data, 30, 5), as_matrix(c.data, 4, 5));
  const auto got = to_host(c.data);
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 5; ++j) {
      double exact = 0;
      for (int r = 0; r < 30; ++r) exact += ha[r * 4 + i] * hb[r * 5 + j];
      EXPECT_NEAR(got[i * 5 + j], exact, 1e-12);
    }
  }
}

TEST(Gemm, ZeroInnerDimensionScalesC) {
  check_gemm<double>(4, 3, 0, Trans::no, Trans::no, 1.0, 0.5, 1e-15);
  check_gemm<double>(4, 3, 0, Trans::yes, Trans::no, 1.0, 0.0, 1e-15);
}

TEST(Gemm, RejectsMismatchedShapes) {
  Vec<float> v("v", 64);
  EXPECT_THROW(gemm(Trans::no, Trans::no, 1.f, as_matrix(v, 2, 3), as_matrix(v, 2, 3), 0.f,
                    as_matrix(v, 2, 3)),
               Error);
  EXPECT_THROW(gemm(Trans::no, Trans::yes, 1.f, as_matrix(v, 2, 3), as_matrix(v, 4, 3), 0.f,
                    as_matrix(v, 2, 5)),
               Error);
  EXPECT_THROW(as_matrix(v, 9, 8), Error);
}

}  // namespace
}  // namespace hpctrain::core
