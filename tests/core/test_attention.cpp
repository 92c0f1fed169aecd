// core::attention_forward / attention_backward (the attention's products and softmax between
// its projections): against a float64 attention computed here; in leaves, each leaf's values with
// the bits of a call on that leaf's samples alone, whether the leaves run one after another or
// side by side on held threads (deterministic training: oneDNN on one thread, the rank's threads
// for the leaves), on every gemm backend, repeated (the batched matmuls' scratchpads are the
// calling thread's: a primitive run on two threads at once must not share one).
#include "gemm_backend_scope.hpp"
#include "gradient_check.hpp"
#include "hpctrain/core/attention.hpp"
#include "hpctrain/core/conv.hpp"
#include "hpctrain/core/environment.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace hpctrain::core {
namespace {

using hpctrain::testing::GemmBackendScope;
using hpctrain::testing::random_values;

std::size_t differing(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return std::max(a.size(), b.size());
  std::size_t n = 0;
  for (std::size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return n;
}

/// One call's results: probabilities, context, dqkv (host copies).
struct Results {
  std::vector<float> probabilities, context, dqkv;
};

/// attention_forward then attention_backward on host inputs qkv [3, N T, D], dcontext [N T, D].
Results run(const AttentionShape& s, std::int64_t leaf, const std::vector<float>& qkv,
            const std::vector<float>& dcontext) {
  const std::int64_t rows = s.batch * s.tokens, squares = s.batch * s.heads * s.tokens * s.tokens;
  Vec<float> q("qkv", qkv.size()), p("p", squares), c("context", rows * s.dim), dc("dcontext", dcontext.size());
  Vec<float> dp("dp", squares), dq("dqkv", qkv.size());
  from_host(q, qkv);
  from_host(dc, dcontext);
  attention_forward<float>(s, leaf, q, p, c);
  attention_backward<float>(s, leaf, q, p, dc, dp, dq);
  return {to_host(p), to_host(c), to_host(dq)};
}

/// Rows [first, first + count) of every part of a part-major [parts, rows, width] buffer.
std::vector<float> part_rows(const std::vector<float>& v, std::int64_t parts, std::int64_t rows,
                             std::int64_t width, std::int64_t first, std::int64_t count) {
  std::vector<float> out;
  for (std::int64_t p = 0; p < parts; ++p) {
    const auto* at = v.data() + (p * rows + first) * width;
    out.insert(out.end(), at, at + count * width);
  }
  return out;
}

/// The reference for leaves of `leaf` samples: a call per leaf on that leaf's samples alone,
/// its results put back in the batch's layout.
Results one_call_per_leaf(const AttentionShape& s, std::int64_t leaf, const std::vector<float>& qkv,
                          const std::vector<float>& dcontext) {
  const std::int64_t rows = s.batch * s.tokens, sq = s.heads * s.tokens * s.tokens;
  Results out{std::vector<float>(static_cast<std::size_t>(s.batch * sq)),
              std::vector<float>(static_cast<std::size_t>(rows * s.dim)), std::vector<float>(qkv.size())};
  for (std::int64_t first = 0; first < s.batch; first += leaf) {
    const std::int64_t count = std::min(leaf, s.batch - first), t = s.tokens, d = s.dim;
    const AttentionShape alone{count, t, d, s.heads};
    const Results r = run(alone, count, part_rows(qkv, 3, rows, d, first * t, count * t),
                          part_rows(dcontext, 1, rows, d, first * t, count * t));
    std::copy(r.probabilities.begin(), r.probabilities.end(), out.probabilities.begin() + first * sq);
    std::copy(r.context.begin(), r.context.end(), out.context.begin() + first * t * d);
    for (std::int64_t p = 0; p < 3; ++p) {
      std::copy(r.dqkv.begin() + p * count * t * d, r.dqkv.begin() + (p + 1) * count * t * d,
                out.dqkv.begin() + (p * rows + first * t) * d);
    }
  }
  return out;
}

/// The attention in float64 on the host, written out plainly: S = q k^T / sqrt(dh), P = softmax,
/// context = P v; dP = dcontext v^T, dv = P^T dcontext, dS = P (dP - rowsum(dP P)),
/// dq = dS k / sqrt(dh), dk = dS^T q / sqrt(dh).
struct Reference {
  std::vector<double> probabilities, context, dqkv;
};

Reference float64_attention(const AttentionShape& s, const std::vector<float>& qkv, const std::vector<float>& dcontext) {
  const std::int64_t n = s.batch, t = s.tokens, d = s.dim, h = s.heads, dh = d / h, rows = n * t;
  const double scale = 1.0 / std::sqrt(static_cast<double>(dh));
  Reference r{std::vector<double>(static_cast<std::size_t>(n * h * t * t)),
              std::vector<double>(static_cast<std::size_t>(rows * d)), std::vector<double>(qkv.size())};
  const auto at = [&](std::int64_t part, std::int64_t sample, std::int64_t token, std::int64_t head, std::int64_t j) {
    return (part * rows + sample * t + token) * d + head * dh + j;
  };
  for (std::int64_t a = 0; a < n; ++a) {
    for (std::int64_t hh = 0; hh < h; ++hh) {
      std::vector<double> p(static_cast<std::size_t>(t * t)), dp(p.size());
      for (std::int64_t i = 0; i < t; ++i) {
        double m = -INFINITY;
        for (std::int64_t j = 0; j < t; ++j) {
          double dot = 0;
          for (std::int64_t c = 0; c < dh; ++c) dot += static_cast<double>(qkv[at(0, a, i, hh, c)]) * qkv[at(1, a, j, hh, c)];
          p[i * t + j] = dot * scale;
          m = std::max(m, p[i * t + j]);
        }
        double sum = 0;
        for (std::int64_t j = 0; j < t; ++j) sum += (p[i * t + j] = std::exp(p[i * t + j] - m));
        for (std::int64_t j = 0; j < t; ++j) p[i * t + j] /= sum;
        for (std::int64_t c = 0; c < dh; ++c) {
          double v = 0;
          for (std::int64_t j = 0; j < t; ++j) v += p[i * t + j] * qkv[at(2, a, j, hh, c)];
          r.context[at(0, a, i, hh, c)] = v;
        }
        for (std::int64_t j = 0; j < t; ++j) {
          double dot = 0;
          for (std::int64_t c = 0; c < dh; ++c) dot += static_cast<double>(dcontext[at(0, a, i, hh, c)]) * qkv[at(2, a, j, hh, c)];
          dp[i * t + j] = dot;
        }
        double row = 0;
        for (std::int64_t j = 0; j < t; ++j) row += dp[i * t + j] * p[i * t + j];
        for (std::int64_t j = 0; j < t; ++j) dp[i * t + j] = p[i * t + j] * (dp[i * t + j] - row);  // dS
      }
      for (std::int64_t i = 0; i < t; ++i) {
        for (std::int64_t c = 0; c < dh; ++c) {
          double dq = 0, dk = 0, dv = 0;
          for (std::int64_t j = 0; j < t; ++j) {
            dq += dp[i * t + j] * qkv[at(1, a, j, hh, c)];
            dk += dp[j * t + i] * qkv[at(0, a, j, hh, c)];
            dv += p[j * t + i] * dcontext[at(0, a, j, hh, c)];
          }
          r.dqkv[at(0, a, i, hh, c)] = dq * scale;
          r.dqkv[at(1, a, i, hh, c)] = dk * scale;
          r.dqkv[at(2, a, i, hh, c)] = dv;
        }
      }
      std::copy(p.begin(), p.end(), r.probabilities.begin() + (a * h + hh) * t * t);
    }
  }
  return r;
}

void expect_near(const std::vector<float>& got, const std::vector<double>& want, double tol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], tol) << what << " " << i;
}

class AttentionLeaves : public ::testing::TestWithParam<GemmBackend> {};

// 11 samples of 7 tokens, 12 columns in 3 heads, leaves of 4 (4, 4, 3) and of 16 (one leaf):
// leaf by leaf and, held at 2 threads, side by side -- each with the bits of a call per leaf,
// near float64, three rounds each (the primitives and scratchpads reused, on either thread).
TEST_P(AttentionLeaves, HaveTheBitsOfACallPerLeafOnOneThreadOrSideBySide) {
  const GemmBackendScope scope(GetParam());
  const AttentionShape s{11, 7, 12, 3};
  const std::int64_t rows = s.batch * s.tokens;
  const auto qkv = random_values<float>(static_cast<std::size_t>(3 * rows * s.dim), 41, -2.0, 2.0);
  const auto dcontext = random_values<float>(static_cast<std::size_t>(rows * s.dim), 42);
  const Reference want = float64_attention(s, qkv, dcontext);
  const int threads_before = std::max(1, blas_threads());
  for (const std::int64_t leaf : {std::int64_t{4}, std::int64_t{16}}) {
    const Results per_leaf = one_call_per_leaf(s, leaf, qkv, dcontext);
    expect_near(per_leaf.probabilities, want.probabilities, 1e-6, "probabilities");
    expect_near(per_leaf.context, want.context, 1e-5, "context");
    expect_near(per_leaf.dqkv, want.dqkv, 1e-5, "dqkv");
    for (const int threads : {1, 2}) {
      set_blas_threads(threads);
      const SingleThreadedLibraries single;  // oneDNN on one thread; the leaves on `threads`
      for (int round = 1; round <= 3; ++round) {
        SCOPED_TRACE(::testing::Message() << "leaves of " << leaf << ", " << threads << " threads held, round " << round);
        const Results got = run(s, leaf, qkv, dcontext);
        EXPECT_EQ(differing(got.probabilities, per_leaf.probabilities), 0u);
        EXPECT_EQ(differing(got.context, per_leaf.context), 0u);
        EXPECT_EQ(differing(got.dqkv, per_leaf.dqkv), 0u);
      }
    }
  }
  set_blas_threads(threads_before);
  // No leaves (ordinary training): one call over every sample, near float64.
  const Results whole = run(s, 0, qkv, dcontext);
  expect_near(whole.context, want.context, 1e-5, "context, one call");
  expect_near(whole.dqkv, want.dqkv, 1e-5, "dqkv, one call");
}

std::vector<GemmBackend> backends() {
  std::vector<GemmBackend> out{GemmBackend::blas};
  if (onednn_available()) out.push_back(GemmBackend::onednn);
  if (libxsmm_available()) out.push_back(GemmBackend::libxsmm);
  return out;
}

INSTANTIATE_TEST_SUITE_P(Backends, AttentionLeaves, ::testing::ValuesIn(backends()),
                         [](const ::testing::TestParamInfo<GemmBackend>& info) {
                           return std::string(gemm_backend_name(info.param));
                         });

// A buffer too small for the shape gets batched_gemm's clear error on every path: leaves one
// after another on the views, and side by side on raw pointers (held at 2 threads), where the
// leaves' operands are checked before any leaf runs.
TEST_P(AttentionLeaves, RejectABufferTooSmallForTheShapeOnEveryPath) {
  const GemmBackendScope scope(GetParam());
  const AttentionShape s{6, 5, 8, 2};
  const std::int64_t rows = s.batch * s.tokens, squares = s.batch * s.heads * s.tokens * s.tokens;
  Vec<float> qkv("qkv", 3 * rows * s.dim), context("context", rows * s.dim);
  Vec<float> short_p("p", squares - 1);  // one element short: the last leaf's last row
  const int threads_before = std::max(1, blas_threads());
  for (const int threads : {1, 2}) {
    set_blas_threads(threads);
    const SingleThreadedLibraries single;
    for (const std::int64_t leaf : {std::int64_t{2}, std::int64_t{0}}) {
      SCOPED_TRACE(::testing::Message() << "leaves of " << leaf << ", " << threads << " threads held");
      try {
        attention_forward<float>(s, leaf, qkv, short_p, context);
        ADD_FAILURE() << "no error for a probabilities buffer one element short";
      } catch (const std::exception& e) {
        EXPECT_NE(std::string(e.what()).find("of a buffer of " + std::to_string(squares - 1)), std::string::npos)
            << e.what();
      }
    }
  }
  set_blas_threads(threads_before);
}

// Where this build runs the leaves side by side: float with oneDNN (and OpenMP), not on the
// blas backend (its batched products are the portable Kokkos kernel), never for double.
TEST(AttentionLeavesSideBySide, FloatOnTheOnednnBatchedMatmulOnly) {
  EXPECT_FALSE(attention_leaves_side_by_side<double>());
  {
    const GemmBackendScope scope(GemmBackend::blas);
    EXPECT_FALSE(attention_leaves_side_by_side<float>());
  }
  if (onednn_available()) {
    const GemmBackendScope scope(GemmBackend::onednn);
#ifdef HPCTRAIN_TEST_CORE_OPENMP
    EXPECT_TRUE(attention_leaves_side_by_side<float>());
#else
    EXPECT_FALSE(attention_leaves_side_by_side<float>());
#endif
  }
}

}  // namespace
}  // namespace hpctrain::core
