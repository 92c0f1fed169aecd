#pragma once
/// @file
/// Self-attention's products and softmax, between its projections, on the layer's part-major
/// buffers (models/multi_head_attention.cpp): qkv [3, N T, D] (parts q, k, v, each [N T, D]
/// with head h of sample n the [T, dh] block at rows n T.., columns h dh..), probabilities
/// [N, H, T, T], context [N T, D]; dh = D / H.
///
/// Leaves: the samples in leaves of `leaf` samples (deterministic training's micro-shards; leaf
/// = N: one leaf), each leaf's products called on that leaf's samples alone, with the shapes a
/// pass of that leaf alone uses (oneDNN's batched matmul is not documented to give a sample the
/// same bits in a larger batch). Where deterministic training holds oneDNN at one thread and the
/// rank has several, the leaves run side by side on its threads (attention_leaves_side_by_side),
/// each leaf on one thread: the same bits as one after another.

#include "hpctrain/core/tensor.hpp"

#include <cstdint>

namespace hpctrain::core {

/// N samples of T tokens, D columns, H heads.
struct AttentionShape {
  std::int64_t batch, tokens, dim, heads;
};

/// Per leaf: probabilities = softmax((1 / sqrt(dh)) q k^T) per row; context = probabilities v.
template <class T>
void attention_forward(const AttentionShape& shape, std::int64_t leaf, const Vec<T>& qkv,
                       const Vec<T>& probabilities, const Vec<T>& context);

/// Per leaf, from dcontext: dP = dcontext v^T (into dprobabilities), dv = P^T dcontext,
/// dS = P (dP - rowsum(dP P)) in place, dq = dS k / sqrt(dh), dk = dS^T q / sqrt(dh), written
/// into their parts of dqkv [3, N T, D].
template <class T>
void attention_backward(const AttentionShape& shape, std::int64_t leaf, const Vec<T>& qkv,
                        const Vec<T>& probabilities, const Vec<T>& dcontext,
                        const Vec<T>& dprobabilities, const Vec<T>& dqkv);

/// Whether this build runs attention_forward/backward's leaves side by side on the rank's held
/// threads for T (float with oneDNN and OpenMP, gemm backend not blas); false: one at a time.
template <class T>
bool attention_leaves_side_by_side();

}  // namespace hpctrain::core
