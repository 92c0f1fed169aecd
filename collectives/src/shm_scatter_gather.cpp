// Single-copy reduce-scatter and all-gather through node shared memory, for the m ranks of one
// node, on the segments, progress counters and waits of the shm all-reduce (shm_flags.hpp;
// shm_allreduce.cpp has the layout and the memory-ordering argument, which holds unchanged:
// data before use by the release/acquire of 3k+1, slot reuse by the 3k+3 wait).
//
// Parts. Part q of the vector belongs to local rank q: for shm, block q (elements
// [offsets[q], offsets[q+1])), the blocks equal (reduce_scatter, allgather) or balanced within
// one element (the in-place forms); for hierarchical, the concatenation of the blocks of q's
// inter group (hierarchical_scatter_gather.cpp), copied in and out range by range (for_each_run).
// Each step k moves one piece of every part at once, so every rank has work in every step:
// piece j of part q is its elements [j·c, (j+1)·c), and the step count is the same on every
// rank (the longest part over c).
//
// Reduce-scatter, per step (c = ⌊s / (m·elem)⌋ elements, so m pieces fill a staging buffer):
//  1. every rank copies piece j of every part of its input into its staging buffer (part q's
//     piece at q·c); publish 3k+1; wait for 3k+1 from all;
//  2. rank l reduces piece j of part l from the m staging buffers, in local-rank order
//     (reduce_staged: the same association whatever the timing, and the same as the small shm
//     all-reduce), straight into its output; publish 3k+3.
// All-gather, per step (c = ⌊s / elem⌋ elements):
//  1. every rank copies piece j of its own part into its staging buffer; publish 3k+1; wait;
//  2. every rank copies piece j of every other part from its owner's staging buffer into its
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

NodeParts block_parts(const std::vector<std::size_t>& offsets) {
  NodeParts parts(offsets.empty() ? 0 : offsets.size() - 1);
  for (std::size_t q = 0; q < parts.size(); ++q) parts[q] = {{offsets[q], offsets[q + 1] - offsets[q]}};
  return parts;
}

std::size_t part_length(const std::vector<PartRange>& part) noexcept {
  std::size_t n = 0;
  for (const PartRange& r : part) n += r.count;
  return n;
}

namespace {

std::size_t longest_part(const NodeParts& parts) {
  std::size_t longest = 0;
  for (const auto& part : parts) longest = std::max(longest, part_length(part));
  return longest;
}

/// Calls f(first, at, n) for each run of elements [from, from + len) of `part` (clipped to the
/// part): n elements at part offset `at`, which are the vector's elements [first, first + n).
template <class F>
void for_each_run(const std::vector<PartRange>& part, std::size_t from, std::size_t len, F&& f) {
  std::size_t start = 0;  // part offset of the range
  for (const PartRange& r : part) {
    if (len == 0) return;
    if (from < start + r.count) {  // from >= start: the runs are taken in order
      const std::size_t skip = from - start, n = std::min(r.count - skip, len);
      f(r.first + skip, from, n);
      from += n;
      len -= n;
    }
    start += r.count;
  }
}

void require_parts(const char* op, const NodeGroup& g, const NodeParts& parts) {
  HPCTRAIN_REQUIRE(parts.size() == static_cast<std::size_t>(g.local_size()),
                   std::string(op) + ": one part per local rank expected");
}

}  // namespace

void shm_reduce_scatter(CollContext& ctx, NodeGroup& g, const void* send, void* own_part, const NodeParts& parts,
                        DataType type, ReduceOp op) {
  require_parts("shm reduce_scatter", g, parts);
  const int m = g.local_size(), me = g.local_rank();
  const std::size_t elem = size_of(type);
  const std::size_t c = g.segment_bytes / (static_cast<std::size_t>(m) * elem);
  HPCTRAIN_REQUIRE(c > 0, "shm reduce_scatter: HPCTRAIN_SHM_SEGMENT_BYTES is below one element per local rank");
  const auto* in = static_cast<const std::byte*>(send);
  auto* out = static_cast<std::byte*>(own_part);
  const std::size_t longest = longest_part(parts), mine_len = part_length(parts[static_cast<std::size_t>(me)]);
  for (std::size_t from = 0; from < longest; from += c) {
    const std::uint64_t k = g.next_segment++;
    std::byte* mine = staging(g, me, k);
    wait_slot_free(g, ctx.policy, k);
    for (int q = 0; q < m; ++q) {
      std::byte* slot = mine + static_cast<std::size_t>(q) * c * elem;
      for_each_run(parts[static_cast<std::size_t>(q)], from, c, [&](std::size_t first, std::size_t at, std::size_t n) {
        std::memcpy(slot + (at - from) * elem, in + first * elem, n * elem);
      });
    }
    publish(g, kPhases * k + 1);
    wait_for_all(g, ctx.policy, kPhases * k + 1);  // every input piece of this step is staged
    if (from < mine_len)
      reduce_staged(g, k, out + from * elem, static_cast<std::size_t>(me) * c * elem, std::min(c, mine_len - from),
                    type, op);
    publish(g, kPhases * k + 3);  // done reading every buffer of step k
  }
}

void shm_allgather(CollContext& ctx, NodeGroup& g, const void* own_part, void* buf, const NodeParts& parts,
                   DataType type) {
  require_parts("shm allgather", g, parts);
  const int m = g.local_size(), me = g.local_rank();
  const std::size_t elem = size_of(type);
  const std::size_t c = g.segment_bytes / elem;
  HPCTRAIN_REQUIRE(c > 0, "shm allgather: HPCTRAIN_SHM_SEGMENT_BYTES is below one element");
  const auto* own = static_cast<const std::byte*>(own_part);
  auto* data = static_cast<std::byte*>(buf);
  const std::size_t longest = longest_part(parts), mine_len = part_length(parts[static_cast<std::size_t>(me)]);
  for (std::size_t from = 0; from < longest; from += c) {
    const std::uint64_t k = g.next_segment++;
    wait_slot_free(g, ctx.policy, k);
    if (from < mine_len) std::memcpy(staging(g, me, k), own + from * elem, std::min(c, mine_len - from) * elem);
    publish(g, kPhases * k + 1);
    wait_for_all(g, ctx.policy, kPhases * k + 1);  // every part's piece of this step is staged
    for (int q = 0; q < m; ++q) {
      if (q == me) continue;
      const std::byte* slot = staging(g, q, k);
      for_each_run(parts[static_cast<std::size_t>(q)], from, c, [&](std::size_t first, std::size_t at, std::size_t n) {
        std::memcpy(data + first * elem, slot + (at - from) * elem, n * elem);
      });
    }
    publish(g, kPhases * k + 3);
  }
}

}  // namespace hpctrain::coll::detail
