#pragma once
/// @file
/// The pairwise tree over a node's leaves, as coll::TreeSum adds a step's micro-shard terms:
/// node (l, i) is node (l-1, 2i) + node (l-1, 2i+1), or its left child alone where the right
/// one holds no leaf. Deterministic training computes a rank's aligned nodes of micro-shards in
/// one pass (Sequential::set_gradient_leaves); the kernels that sum over a batch's rows
/// (gemm_tn_leaf_tree, column_sums_leaf_tree) use this to give every node's bits as the tree of
/// its micro-shards' separate sums, whatever the pass's row count.

#include <algorithm>
#include <cstdint>
#include <string>

#include <Kokkos_Macros.hpp>

#include "hpctrain/base/error.hpp"

namespace hpctrain::core {

/// Leaves of `leaf_rows` rows over `rows` rows, the last possibly shorter (leaf_rows >= 1).
constexpr std::int64_t leaf_count(std::int64_t rows, std::int64_t leaf_rows) {
  return (rows + leaf_rows - 1) / leaf_rows;
}

/// leaf(first, count) for each leaf of `leaf_rows` rows over `rows` rows, in order.
template <class Leaf>
void for_each_leaf(std::int64_t leaf_rows, std::int64_t rows, const Leaf& leaf) {
  for (std::int64_t first = 0; first < rows; first += leaf_rows) leaf(first, std::min(leaf_rows, rows - first));
}

/// The most stack entries leaf_tree_sum() uses for `leaves` leaves (the slots it asks for are
/// 0 .. leaf_tree_depth(leaves) - 1): ceil(lg leaves) + 1.
constexpr int leaf_tree_depth(std::int64_t leaves) {
  int depth = 1;
  while ((std::int64_t{1} << (depth - 1)) < leaves) ++depth;
  return depth;
}

/// Sums leaves 0 .. leaves-1 over the tree above, leaf 0 leftmost. compute(l, slot) writes leaf
/// l into storage slot `slot`; add(dst, src) adds slot src into slot dst (float additions
/// commute, so the order inside one addition does not matter). The result ends in slot 0. A leaf
/// at stack depth d is computed in slot d, so at most leaf_tree_depth(leaves) slots are used.
template <class Compute, class Add>
void leaf_tree_sum(std::int64_t leaves, const Compute& compute, const Add& add) {
  leaf_tree_sum(leaves, compute, add, [&](std::int64_t l, int dst) {
    compute(l, dst + 1);
    add(dst, dst + 1);
  });
}

/// leaf_tree_sum() where a leaf that is added into the slot below it as soon as it is computed
/// (the right leaf of a pair; the last leaf onto the node before it) is handed to
/// compute_add(l, dst) instead: slot dst += leaf l, with the bits of compute(l, dst + 1) then
/// add(dst, dst + 1) (a kernel adds the leaf from registers into dst: no store and reload).
template <class Compute, class Add, class ComputeAdd>
void leaf_tree_sum(std::int64_t leaves, const Compute& compute, const Add& add, const ComputeAdd& compute_add) {
  HPCTRAIN_REQUIRE(leaves >= 1, "leaf_tree_sum: " + std::to_string(leaves) + " leaves");
  int levels[64];
  int depth = 0;
  for (std::int64_t l = 0; l < leaves; ++l) {
    const bool last = l == leaves - 1;
    if (depth >= 1 && (levels[depth - 1] == 0 || last)) {
      compute_add(l, depth - 1);  // the leaf and the node below it merge at once
      if (levels[depth - 1] != 0) break;  // the last leaf, right-clipped: the rest merges below
      levels[depth - 1] = 1;
    } else {
      compute(l, depth);
      levels[depth++] = 0;
    }
    // siblings merge as soon as both are complete
    while (depth >= 2 && levels[depth - 1] == levels[depth - 2]) {
      add(depth - 2, depth - 1);
      --depth;
      ++levels[depth - 1];
    }
  }
  // The last leaves' nodes are right-clipped: each is the right child of the one below.
  while (depth >= 2) {
    add(depth - 2, depth - 1);
    --depth;
  }
}

/// The additions of leaf_tree_sum() over leaves already in place: add(i, j) adds leaf j's
/// node into leaf i's (i < j), and at the end leaf 0's holds the sum. Level by level, node i (a
/// multiple of 2w) adds node i + w where that holds a leaf: the tree's additions exactly (a
/// right-clipped node is its left child alone), without stack or exceptions, so device code can
/// call it. leaves <= 1 adds nothing.
template <class Add>
KOKKOS_INLINE_FUNCTION void leaf_tree_add_in_place(std::int64_t leaves, const Add& add) {
  for (std::int64_t w = 1; w < leaves; w *= 2) {
    for (std::int64_t i = 0; i + w < leaves; i += 2 * w) add(i, i + w);
  }
}

/// leaf_tree_add_in_place() on single values, for a kernel's thread: node(l) (a reference)
/// holds leaf l's term, and on return node(0) holds the sum.
template <class Node>
KOKKOS_INLINE_FUNCTION void leaf_tree_sum_in_place(std::int64_t leaves, const Node& node) {
  leaf_tree_add_in_place(leaves, [&](std::int64_t i, std::int64_t j) { node(i) += node(j); });
}

}  // namespace hpctrain::core
