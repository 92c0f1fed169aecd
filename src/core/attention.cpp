// Self-attention's products and softmax (core/attention.hpp), leaf by leaf.
//
// One description of each leaf's work (forward_leaf, backward_leaf: which batched products on
// which strided blocks, which softmax rows), run by one of two executors:
//   - Views: core::batched_gemm and core::softmax_rows on the Kokkos buffers, one leaf after
//     another (every build and type; the only one in ordinary training, where one leaf holds
//     every sample and oneDNN and Kokkos use the rank's threads inside each call);
//   - Pointers (float, oneDNN): the same oneDNN batched matmuls (onednn::batched_gemm, what
//     core::batched_gemm calls for float) and the same softmax rows (softmax_row), on raw
//     pointers, so that the leaves can run side by side on the rank's held threads
//     (detail::leaves_on_team); each leaf on one thread, as a pass of it alone on a held
//     oneDNN runs it, so the bits are the same as one after another.
// Before the pointer executor runs, a third (CheckExec) walks every leaf's work checking its
// operands as the views' batched_gemm does, so a bad shape gets the same clear error on both.
// Costs per leaf of L samples: 4 L T^2 D flops forward (Q K^T, P V), 8 L T^2 D backward.
#include "hpctrain/core/attention.hpp"

#include "hpctrain/base/error.hpp"
#include "hpctrain/core/conv.hpp"
#include "hpctrain/core/gemm.hpp"
#include "hpctrain/core/leaf_tree.hpp"
#include "hpctrain/core/softmax.hpp"
#include "leaves_side_by_side.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <type_traits>

#ifdef HPCTRAIN_HAVE_ONEDNN
#include "gemm_onednn.hpp"
#endif

namespace hpctrain::core {

namespace {

/// The buffers a leaf's work reads and writes.
enum Buffer : int { kQkv, kProbabilities, kContext, kDqkv, kDprobabilities, kDcontext, kBuffers };

/// [outer, inner, rows, cols] matrices at element `offset` of buffer `buffer` with element
/// strides {outer, inner, row, col}.
struct Operand {
  Buffer buffer;
  std::int64_t offset;
  std::array<std::int64_t, 4> strides;
  Operand transposed() const { return {buffer, offset, {strides[0], strides[1], strides[3], strides[2]}}; }
};

/// Where a leaf's operands lie (N, T, D, H of the whole batch; samples first .. first+count).
struct LeafLayout {
  std::int64_t rows, tokens, dim, heads, head_dim, first;

  LeafLayout(const AttentionShape& s, std::int64_t first_sample)
      : rows(s.batch * s.tokens), tokens(s.tokens), dim(s.dim), heads(s.heads), head_dim(s.dim / s.heads),
        first(first_sample) {}

  /// Part `p` (0 q, 1 k, 2 v) of a part-major [3, N T, D] buffer, or (p = 0) an [N T, D] one,
  /// as the leaf's [T, dh] head matrices: sample (outer), head (inner).
  Operand heads_of(Buffer b, std::int64_t p = 0) const {
    return {b, p * rows * dim + first * tokens * dim, {tokens * dim, head_dim, dim, 1}};
  }
  /// The leaf's [T, T] matrices of an [N, H, T, T] buffer.
  Operand squares_of(Buffer b) const {
    return {b, first * heads * tokens * tokens, {heads * tokens * tokens, tokens * tokens, tokens, 1}};
  }
};

template <class T>
T scale_of(const AttentionShape& s) {
  return T(1) / static_cast<T>(std::sqrt(static_cast<double>(s.dim / s.heads)));
}

template <class T, class Exec>
void forward_leaf(const AttentionShape& s, std::int64_t first, std::int64_t count, const Exec& exec) {
  const LeafLayout at(s, first);
  const std::int64_t h = s.heads, t = s.tokens, dh = at.head_dim;
  const Operand p = at.squares_of(kProbabilities);
  exec.gemm({count, h, t, t, dh}, scale_of<T>(s), at.heads_of(kQkv, 0), at.heads_of(kQkv, 1).transposed(), T(0), p);
  exec.softmax(p.offset, count * h * t, t);
  exec.gemm({count, h, t, dh, t}, T(1), p, at.heads_of(kQkv, 2), T(0), at.heads_of(kContext));
}

template <class T, class Exec>
void backward_leaf(const AttentionShape& s, std::int64_t first, std::int64_t count, const Exec& exec) {
  const LeafLayout at(s, first);
  const std::int64_t h = s.heads, t = s.tokens, dh = at.head_dim;
  const T scale = scale_of<T>(s);
  const BatchedGemmShape square{count, h, t, t, dh}, tall{count, h, t, dh, t};
  const Operand p = at.squares_of(kProbabilities), ds = at.squares_of(kDprobabilities);
  const Operand dout = at.heads_of(kDcontext);
  exec.gemm(square, T(1), dout, at.heads_of(kQkv, 2).transposed(), T(0), ds);  // dP
  exec.gemm(tall, T(1), p.transposed(), dout, T(0), at.heads_of(kDqkv, 2));    // dv
  exec.softmax_backward(p.offset, count * h * t, t);                            // dP -> dS
  exec.gemm(tall, scale, ds, at.heads_of(kQkv, 1), T(0), at.heads_of(kDqkv, 0));               // dq
  exec.gemm(tall, scale, ds.transposed(), at.heads_of(kQkv, 0), T(0), at.heads_of(kDqkv, 1));  // dk
}

/// Leaves one after another on the Kokkos buffers.
template <class T>
struct ViewExec {
  std::array<Vec<T>, kBuffers> buffers;

  StridedMatrices<T> matrices(const Operand& o) const {
    return {buffers[o.buffer], o.offset, o.strides[0], o.strides[1], o.strides[2], o.strides[3]};
  }
  void gemm(const BatchedGemmShape& s, T alpha, const Operand& a, const Operand& b, T beta, const Operand& c) const {
    batched_gemm(s, alpha, matrices(a), matrices(b), beta, matrices(c));
  }
  Vec<T> rows_of(Buffer b, std::int64_t offset, std::int64_t rows, std::int64_t len) const {
    return Kokkos::subview(buffers[b], std::make_pair(offset, offset + rows * len));
  }
  void softmax(std::int64_t offset, std::int64_t rows, std::int64_t len) const {
    softmax_rows(rows, len, rows_of(kProbabilities, offset, rows, len));
  }
  void softmax_backward(std::int64_t offset, std::int64_t rows, std::int64_t len) const {
    softmax_rows_backward(rows, len, rows_of(kProbabilities, offset, rows, len), rows_of(kDprobabilities, offset, rows, len));
  }
};

/// A leaf's operands checked as the view executor's calls check them (batched_gemm's bounds;
/// the softmax rows inside their buffers), nothing computed: run over every leaf before the
/// leaves go to oneDNN on raw pointers, so a bad shape gets the same clear error there.
template <class T>
struct CheckExec {
  const ViewExec<T>& views;

  void gemm(const BatchedGemmShape& s, T, const Operand& a, const Operand& b, T, const Operand& c) const {
    require_batched_gemm_operands(s, views.matrices(a), views.matrices(b), views.matrices(c));
  }
  void rows_inside(Buffer b, std::int64_t offset, std::int64_t rows, std::int64_t len) const {
    const auto size = static_cast<std::int64_t>(views.buffers[b].extent(0));
    HPCTRAIN_REQUIRE(offset >= 0 && offset + rows * len <= size,
                     "attention: softmax rows reach element " + std::to_string(offset + rows * len - 1) +
                         " of a buffer of " + std::to_string(size));
  }
  void softmax(std::int64_t offset, std::int64_t rows, std::int64_t len) const {
    rows_inside(kProbabilities, offset, rows, len);
  }
  void softmax_backward(std::int64_t offset, std::int64_t rows, std::int64_t len) const {
    rows_inside(kProbabilities, offset, rows, len);
    rows_inside(kDprobabilities, offset, rows, len);
  }
};

#ifdef HPCTRAIN_HAVE_ONEDNN
/// A leaf on the calling thread through raw pointers (float on host memory, oneDNN): safe on
/// any thread of the team.
struct PointerExec {
  std::array<float*, kBuffers> buffers;

  onednn::StridedOperand operand(const Operand& o) const { return {buffers[o.buffer] + o.offset, o.strides}; }
  void gemm(const BatchedGemmShape& s, float alpha, const Operand& a, const Operand& b, float beta,
            const Operand& c) const {
    onednn::batched_gemm({s.outer, s.inner, s.m, s.n, s.k}, alpha, operand(a), operand(b), beta, operand(c));
  }
  void softmax(std::int64_t offset, std::int64_t rows, std::int64_t len) const {
    float* const p = buffers[kProbabilities] + offset;
    for (std::int64_t r = 0; r < rows; ++r) softmax_row(p + r * len, len);
  }
  void softmax_backward(std::int64_t offset, std::int64_t rows, std::int64_t len) const {
    const float* const p = buffers[kProbabilities] + offset;
    float* const dp = buffers[kDprobabilities] + offset;
    for (std::int64_t r = 0; r < rows; ++r) softmax_row_backward(p + r * len, dp + r * len, len);
  }
};
#endif

/// leaf_work(first, count, exec) for every leaf: side by side on raw pointers where the team
/// has several threads, else one after another on the views.
template <class T, class LeafWork>
void run_leaves(const AttentionShape& s, std::int64_t leaf, const std::array<Vec<T>, kBuffers>& buffers,
                const LeafWork& leaf_work) {
  HPCTRAIN_REQUIRE(s.batch >= 0 && s.tokens > 0 && s.heads > 0 && s.dim % s.heads == 0,
                   "attention: bad shape (tokens and heads must be positive, dim divisible by heads)");
  if (s.batch == 0) return;
  const std::int64_t leaf_samples = leaf > 0 ? std::min(leaf, s.batch) : s.batch;
  const std::int64_t leaves = leaf_count(s.batch, leaf_samples);
  [[maybe_unused]] const int team = detail::side_by_side_team(leaves, attention_leaves_side_by_side<T>());
  const ViewExec<T> views{buffers};
#ifdef HPCTRAIN_HAVE_ONEDNN
  if constexpr (std::is_same_v<T, float>) {
    if (team > 1) {
      const CheckExec<T> check{views};
      for_each_leaf(leaf_samples, s.batch, [&](std::int64_t first, std::int64_t count) { leaf_work(first, count, check); });
      PointerExec exec{};
      for (int b = 0; b < kBuffers; ++b) exec.buffers[static_cast<std::size_t>(b)] = buffers[static_cast<std::size_t>(b)].data();
      detail::leaves_on_team(leaves, team, [&](std::int64_t l) {
        const std::int64_t first = l * leaf_samples;
        leaf_work(first, std::min(leaf_samples, s.batch - first), exec);
      });
      return;
    }
  }
#endif
  for_each_leaf(leaf_samples, s.batch, [&](std::int64_t first, std::int64_t count) { leaf_work(first, count, views); });
}

}  // namespace

template <class T>
bool attention_leaves_side_by_side() {
#if defined(HPCTRAIN_HAVE_ONEDNN) && defined(HPCTRAIN_HAVE_OPENMP)
  if constexpr (std::is_same_v<T, float>) return float_products_on_onednn();
#endif
  return false;
}

template <class T>
void attention_forward(const AttentionShape& shape, std::int64_t leaf, const Vec<T>& qkv,
                       const Vec<T>& probabilities, const Vec<T>& context) {
  run_leaves<T>(shape, leaf, {qkv, probabilities, context, Vec<T>(), Vec<T>(), Vec<T>()},
                [&](std::int64_t first, std::int64_t count, const auto& exec) { forward_leaf<T>(shape, first, count, exec); });
}

template <class T>
void attention_backward(const AttentionShape& shape, std::int64_t leaf, const Vec<T>& qkv,
                        const Vec<T>& probabilities, const Vec<T>& dcontext,
                        const Vec<T>& dprobabilities, const Vec<T>& dqkv) {
  run_leaves<T>(shape, leaf, {qkv, probabilities, Vec<T>(), dqkv, dprobabilities, dcontext},
                [&](std::int64_t first, std::int64_t count, const auto& exec) { backward_leaf<T>(shape, first, count, exec); });
}

#define HPCTRAIN_INSTANTIATE(T)                                                                               \
  template bool attention_leaves_side_by_side<T>();                                                           \
  template void attention_forward<T>(const AttentionShape&, std::int64_t, const Vec<T>&, const Vec<T>&,       \
                                     const Vec<T>&);                                                          \
  template void attention_backward<T>(const AttentionShape&, std::int64_t, const Vec<T>&, const Vec<T>&,      \
                                      const Vec<T>&, const Vec<T>&, const Vec<T>&);

HPCTRAIN_INSTANTIATE(float)
HPCTRAIN_INSTANTIATE(double)

}  // namespace hpctrain::core
