// batched_gemm on both backends against a float64 product, with the attention's operands:
// heads read in place from a qkv-like [N T, 3D] buffer, probabilities [N, H, T, T] (plain and
// transposed), and results written into row layouts ([N T, D], or a third of [N T, 3D]) whose
// other elements must stay untouched.
#include "gemm_backend_scope.hpp"
#include "gradient_check.hpp"
#include "hpctrain/base/error.hpp"
#include "hpctrain/core/conv.hpp"
#include "hpctrain/core/gemm.hpp"

#include <cmath>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace hpctrain::core {
namespace {

using hpctrain::testing::GemmBackendScope;
using hpctrain::testing::random_values;

/// Attention extents: N samples (outer), H heads (inner), T tokens, dh columns per head.
struct AttentionCase {
  GemmBackend backend;
  std::int64_t n, h, t, dh;
};

void PrintTo(const AttentionCase& c, std::ostream* os) {
  *os << gemm_backend_name(c.backend) << "_N" << c.n << "_H" << c.h << "_T" << c.t << "_dh"
      << c.dh;
}

/// A host buffer and its operand layout (strides as in StridedMatrices).
template <class T>
struct Operand {
  std::vector<T> host;
  std::int64_t offset, outer, inner, row, col;
  StridedMatrices<T> on_device(const std::string& label) const {
    Vec<T> v(label, host.size());
    from_host(v, host);
    return {v, offset, outer, inner, row, col};
  }
  double at(std::int64_t o, std::int64_t i, std::int64_t r, std::int64_t c) const {
    return static_cast<double>(host[static_cast<std::size_t>(offset + o * outer + i * inner +
                                                             r * row + c * col)]);
  }
};

/// The layouts one attention case offers.
template <class T>
struct Layouts {
  const AttentionCase& c;
  std::int64_t d() const { return c.h * c.dh; }
  /// Part `part` (0 q, 1 k, 2 v) of qkv [N T, 3D] as [T, dh] matrices.
  Operand<T> head(int part, std::uint32_t seed) const {
    const std::int64_t cols = 3 * d();
    return {random_values<T>(static_cast<std::size_t>(c.n * c.t * cols), seed), part * d(),
            c.t * cols, c.dh, cols, 1};
  }
  /// [N T, D] rows as [T, dh] matrices per head (the context).
  Operand<T> context(std::uint32_t seed) const {
    return {random_values<T>(static_cast<std::size_t>(c.n * c.t * d()), seed), 0, c.t * d(),
            c.dh, d(), 1};
  }
  /// [N, H, T, T] contiguous (scores / probabilities).
  Operand<T> square(std::uint32_t seed) const {
    return {random_values<T>(static_cast<std::size_t>(c.n * c.h * c.t * c.t), seed), 0,
            c.h * c.t * c.t, c.t * c.t, c.t, 1};
  }
};

template <class T>
Operand<T> transposed(Operand<T> x) {
  std::swap(x.row, x.col);
  return x;
}

/// Runs C = alpha A B + beta C on device and compares every element of C's buffer with a
/// float64 product (elements outside C's matrices must keep their values). beta = 0 starts
/// C's matrices as NaN.
template <class T>
void check(const AttentionCase& c, std::int64_t m, std::int64_t n, std::int64_t k, double alpha,
           const Operand<T>& a, const Operand<T>& b, double beta, Operand<T> out, double tol) {
  const BatchedGemmShape shape{c.n, c.h, m, n, k};
  std::vector<double> want(out.host.begin(), out.host.end());
  for (std::int64_t o = 0; o < c.n; ++o) {
    for (std::int64_t i = 0; i < c.h; ++i) {
      for (std::int64_t r = 0; r < m; ++r) {
        for (std::int64_t j = 0; j < n; ++j) {
          double s = 0.0;
          for (std::int64_t p = 0; p < k; ++p) s += a.at(o, i, r, p) * b.at(o, i, p, j);
          const auto idx = static_cast<std::size_t>(out.offset + o * out.outer + i * out.inner +
                                                    r * out.row + j * out.col);
          want[idx] = alpha * s + beta * static_cast<double>(out.host[idx]);
          if (beta == 0.0) out.host[idx] = NAN;
        }
      }
    }
  }
  const StridedMatrices<T> dc = out.on_device("c");
  batched_gemm(shape, static_cast<T>(alpha), a.on_device("a"), b.on_device("b"),
               static_cast<T>(beta), dc);
  const std::vector<T> got = to_host(dc.data);
  for (std::size_t e = 0; e < got.size(); ++e) {
    ASSERT_NEAR(got[e], want[e], tol * (1.0 + std::fabs(want[e])))
        << "m=" << m << " n=" << n << " k=" << k << " alpha=" << alpha << " beta=" << beta
        << " at buffer element " << e;
  }
}

/// Every product of the attention's forward and backward, in its own layout.
template <class T>
void check_attention_products(const AttentionCase& c, double tol) {
  const Layouts<T> l{c};
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.dh));
  const std::int64_t t = c.t, dh = c.dh;
  for (const double beta : {0.0, 1.0}) {
    SCOPED_TRACE("beta " + std::to_string(beta));
    // S = scale Q K^T, straight from qkv.
    check<T>(c, t, t, dh, scale, l.head(0, 1), transposed(l.head(1, 2)), beta, l.square(3), tol);
    // context = P V, into [N T, D] rows.
    check<T>(c, t, dh, t, 1.0, l.square(4), l.head(2, 5), beta, l.context(6), tol);
    // dP = dcontext V^T.
    check<T>(c, t, t, dh, 1.0, l.context(7), transposed(l.head(2, 8)), beta, l.square(9), tol);
    // dV = P^T dcontext, into the v third of dqkv.
    check<T>(c, t, dh, t, 1.0, transposed(l.square(10)), l.context(11), beta, l.head(2, 12), tol);
    // dQ = scale dS K, dK = scale dS^T Q.
    check<T>(c, t, dh, t, scale, l.square(13), l.head(1, 14), beta, l.head(0, 15), tol);
    check<T>(c, t, dh, t, -0.75, transposed(l.square(16)), l.head(0, 17), beta, l.head(1, 18),
             tol);
    // The same products on dense [N T, D] parts (the layer's part-major qkv).
    check<T>(c, t, t, dh, scale, l.context(19), transposed(l.context(20)), beta, l.square(21),
             tol);
    check<T>(c, t, dh, t, scale, transposed(l.square(22)), l.context(23), beta, l.context(24),
             tol);
  }
}

class BatchedGemm : public ::testing::TestWithParam<AttentionCase> {
 protected:
  void SetUp() override {
    if (!hpctrain::testing::gemm_backend_built(GetParam().backend)) {
      GTEST_SKIP() << "this build has no " << gemm_backend_name(GetParam().backend);
    }
  }
};

TEST_P(BatchedGemm, AttentionProductsMatchFloat64) {
  const AttentionCase c = GetParam();
  const GemmBackendScope scope(c.backend);
  // float: <= 17-term dot products of values in [-1, 1]: ~17 * 2^-24 relative; 1e-5 covers it.
  check_attention_products<float>(c, 1e-5);
  check_attention_products<double>(c, 1e-12);  // double: always the portable kernel
}

TEST_P(BatchedGemm, EachProductIsTheSameAtAnyBatchCount) {
  // A sample's attention must not depend on how many samples share the call (deterministic
  // training gives equal bytes at any rank count): sample 0 of N computed alone, bit for bit.
  const AttentionCase c = GetParam();
  const GemmBackendScope scope(c.backend);
  const Layouts<float> l{c};
  const auto a = l.head(0, 21), b = transposed(l.head(1, 22));
  const auto whole = l.square(23).on_device("whole");
  const auto first = l.square(23).on_device("first");
  batched_gemm({c.n, c.h, c.t, c.t, c.dh}, 0.25F, a.on_device("a"), b.on_device("b"), 0.0F, whole);
  batched_gemm({1, c.h, c.t, c.t, c.dh}, 0.25F, a.on_device("a"), b.on_device("b"), 0.0F, first);
  const auto hw = to_host(whole.data), hf = to_host(first.data);
  for (std::int64_t e = 0; e < c.h * c.t * c.t; ++e) {
    ASSERT_EQ(hw[static_cast<std::size_t>(e)], hf[static_cast<std::size_t>(e)]) << "element " << e;
  }
}

std::vector<AttentionCase> attention_cases() {
  std::vector<AttentionCase> cases;
  for (const GemmBackend b : hpctrain::testing::all_gemm_backends()) {
    for (const auto& [n, h] : std::vector<std::pair<int, int>>{{1, 1}, {3, 1}, {1, 3}, {3, 2}}) {
      for (const int t : {1, 5, 17}) {
        for (const int dh : {1, 3, 16}) cases.push_back({b, n, h, t, dh});
      }
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(OddShapes, BatchedGemm, ::testing::ValuesIn(attention_cases()),
                         [](const ::testing::TestParamInfo<AttentionCase>& info) {
                           const AttentionCase& c = info.param;
                           return std::string(gemm_backend_name(c.backend)) + "_N" +
                                  std::to_string(c.n) + "_H" + std::to_string(c.h) + "_T" +
                                  std::to_string(c.t) + "_dh" + std::to_string(c.dh);
                         });

TEST(BatchedGemmContract, RejectsOperandsPastTheirBuffer) {
  Vec<float> v("v", 24);
  const StridedMatrices<float> m23{v, 0, 6, 0, 3, 1};  // [2 x 3] matrices, 6 apart
  EXPECT_NO_THROW(batched_gemm({4, 1, 2, 2, 3}, 1.F, m23, m23.transposed(), 0.F,
                               StridedMatrices<float>{v, 20, 0, 0, 2, 1}));
  EXPECT_THROW(batched_gemm({5, 1, 2, 3, 3}, 1.F, m23, m23, 0.F, m23), Error);
  EXPECT_THROW(batched_gemm({1, 1, 2, 3, 3}, 1.F, m23, StridedMatrices<float>{v, 22, 0, 0, 3, 1},
                            0.F, m23),
               Error);
  EXPECT_THROW(batched_gemm({1, -1, 2, 3, 3}, 1.F, m23, m23, 0.F, m23), Error);
}

TEST(BatchedGemmContract, EmptyProductsScaleC) {
  // k = 0: C = beta C (alpha times an empty sum); no extent: nothing is touched.
  const auto c = tensor_from_host<double>("c", {4}, {1.0, 2.0, 3.0, 4.0});
  const StridedMatrices<double> cm{c.data, 0, 0, 0, 2, 1};
  batched_gemm({1, 1, 2, 2, 0}, 1.0, cm, cm, 0.5, cm);
  EXPECT_EQ(to_host(c.data), (std::vector<double>{0.5, 1.0, 1.5, 2.0}));
  batched_gemm({0, 1, 2, 2, 2}, 1.0, cm, cm, 0.0, cm);
  EXPECT_EQ(to_host(c.data), (std::vector<double>{0.5, 1.0, 1.5, 2.0}));
}

}  // namespace
}  // namespace hpctrain::core
