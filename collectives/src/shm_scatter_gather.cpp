// Single-copy reduce-scatter and all-gather through node shared memory, for the m ranks of one
// node, on the segments, progress counters and waits of the shm all-reduce (shm_flags.hpp;
// shm_allreduce.cpp has the layout and the memory-ordering argument, which holds unchanged:
// data before use by the release/acquire of 3k+1, slot reuse by the 3k+3 wait).
//
// Blocks. Block q of the vector (elements [offsets[q], offsets[q+1])) belongs to local rank q;
// the blocks are equal (reduce_scatter, allgather) or balanced within one element (the in-place
// forms). Each step k moves one piece of every block at once, so every rank has work in every
// step: piece j of block q is its elements [j·c, (j+1)·c), and the step count is the same on
// every rank (the longest block over c).
//
// Reduce-scatter, per step (c = ⌊s / (m·elem)⌋ elements, so m pieces fill a staging buffer):
//  1. every rank copies piece j of every block of its input into its staging buffer (block q's
//     piece at q·c); publish 3k+1; wait for 3k+1 from all;
//  2. rank l reduces piece j of block l from the m staging buffers, in local-rank order
//     (reduce_staged: the same association whatever the timing, and the same as the small shm
//     all-reduce), straight into its output; publish 3k+3.
// All-gather, per step (c = ⌊s / elem⌋ elements):
//  1. every rank copies piece j of its own block into its staging buffer; publish 3k+1; wait;
//  2. every rank copies piece j of every other block from its owner's staging buffer into its
//     output; publish 3k+3.
// One wait per step, no phase 3k+2 (no rank waits for it; the counters only need to grow).
//
// Cost per rank, n bytes of the whole vector, m ranks, segment s, flag wait α_f:
//   reduce-scatter: ⌈n/s⌉·α_f + n·β (copy-in) + n/m·(m-1)·γ (reduce its block from m copies)
//   all-gather:     ⌈n/(m·s)⌉·α_f + n/m·β (copy-in) + (m-1)/m·n·β (copy-out)
// against the ring's (p-1)·α + (p-1)/p·n·β (+ (p-1)/p·n·γ), its α a message through the library.

#include <algorithm>
#include <cstring>

#include "algorithms.hpp"
#include "hpctrain/base/error.hpp"
#include "shm_flags.hpp"

namespace hpctrain::coll::detail {

namespace {

std::size_t longest_block(const std::vector<std::size_t>& offsets) {
  std::size_t longest = 0;
  for (std::size_t q = 0; q + 1 < offsets.size(); ++q) longest = std::max(longest, offsets[q + 1] - offsets[q]);
  return longest;
}

/// Elements [first, first + len) of block q's piece starting `from` elements into the block.
struct Piece {
  std::size_t first = 0, len = 0;
};
Piece piece(const std::vector<std::size_t>& offsets, int q, std::size_t from, std::size_t c) {
  const std::size_t b = offsets[static_cast<std::size_t>(q)], e = offsets[static_cast<std::size_t>(q) + 1];
  if (b + from >= e) return {};
  return {b + from, std::min(c, e - b - from)};
}

void require_blocks(const char* op, const NodeGroup& g, const std::vector<std::size_t>& offsets) {
  HPCTRAIN_REQUIRE(offsets.size() == static_cast<std::size_t>(g.local_size()) + 1,
                   std::string(op) + ": one block per local rank expected");
}

}  // namespace

void shm_reduce_scatter(CollContext& ctx, NodeGroup& g, const void* send, void* own_block,
                        const std::vector<std::size_t>& offsets, DataType type, ReduceOp op) {
  require_blocks("shm reduce_scatter", g, offsets);
  const int m = g.local_size(), me = g.local_rank();
  const std::size_t elem = size_of(type);
  const std::size_t c = g.segment_bytes / (static_cast<std::size_t>(m) * elem);
  HPCTRAIN_REQUIRE(c > 0, "shm reduce_scatter: HPCTRAIN_SHM_SEGMENT_BYTES is below one element per local rank");
  const auto* in = static_cast<const std::byte*>(send);
  auto* out = static_cast<std::byte*>(own_block);
  const std::size_t longest = longest_block(offsets);
  for (std::size_t from = 0; from < longest; from += c) {
    const std::uint64_t k = g.next_segment++;
    std::byte* mine = staging(g, me, k);
    wait_slot_free(g, ctx.policy, k);
    for (int q = 0; q < m; ++q) {
      const Piece p = piece(offsets, q, from, c);
      if (p.len) std::memcpy(mine + static_cast<std::size_t>(q) * c * elem, in + p.first * elem, p.len * elem);
    }
    publish(g, kPhases * k + 1);
    wait_for_all(g, ctx.policy, kPhases * k + 1);  // every input piece of this step is staged
    const Piece own = piece(offsets, me, from, c);
    if (own.len) reduce_staged(g, k, out + from * elem, static_cast<std::size_t>(me) * c * elem, own.len, type, op);
    publish(g, kPhases * k + 3);  // done reading every buffer of step k
  }
}

void shm_allgather(CollContext& ctx, NodeGroup& g, void* buf, const std::vector<std::size_t>& offsets,
                   DataType type) {
  require_blocks("shm allgather", g, offsets);
  const int m = g.local_size(), me = g.local_rank();
  const std::size_t elem = size_of(type);
  const std::size_t c = g.segment_bytes / elem;
  HPCTRAIN_REQUIRE(c > 0, "shm allgather: HPCTRAIN_SHM_SEGMENT_BYTES is below one element");
  auto* data = static_cast<std::byte*>(buf);
  const std::size_t longest = longest_block(offsets);
  for (std::size_t from = 0; from < longest; from += c) {
    const std::uint64_t k = g.next_segment++;
    wait_slot_free(g, ctx.policy, k);
    const Piece own = piece(offsets, me, from, c);
    if (own.len) std::memcpy(staging(g, me, k), data + own.first * elem, own.len * elem);
    publish(g, kPhases * k + 1);
    wait_for_all(g, ctx.policy, kPhases * k + 1);  // every block's piece of this step is staged
    for (int q = 0; q < m; ++q) {
      const Piece p = piece(offsets, q, from, c);
      if (q != me && p.len) std::memcpy(data + p.first * elem, staging(g, q, k), p.len * elem);
    }
    publish(g, kPhases * k + 3);
  }
}

}  // namespace hpctrain::coll::detail
