// Hierarchical reduce-scatter and all-gather: the intra-node step through shared memory
// (shm_scatter_gather.cpp), the inter-node step among the ranks with the same local rank (ring or
// recursive halving / doubling, chosen by the cost model), as the hierarchical all-reduce.
//
// Layout. The API's blocks are in communicator-rank order, one per rank. With N nodes of m ranks
// each, the ranks with local rank q (one per node: q's `inter` group) own N blocks; those blocks,
// in inter-rank order, are local rank q's part (NodeParts). So:
//   reduce-scatter: 1. shm reduce-scatter of the parts: local rank q gets its node's partial sum
//                      of its part (N blocks, contiguous, in NodeGroup::part_scratch);
//                   2. reduce-scatter of that vector among the inter group: inter rank j keeps
//                      block j of the part, which is its own block, reduced over every node.
//   all-gather:     1. all-gather of this rank's block among the inter group into a part vector;
//                   2. shm all-gather of the parts: every rank copies out every other local
//                      rank's part; then it copies its own part into place.
// The intra- and inter-node steps run one after the other over the whole vector (not pipelined
// per segment as the all-reduce's).
//
// Nodes of unequal size are refused: a rank whose local rank has no counterpart on a smaller
// node would own blocks that node cannot hand it (the all-reduce slices the vector instead).
// One node: exactly shm. Nodes of one rank each: the inter step alone.
//
// Cost per rank (tuning.hpp), n bytes of the whole vector, m ranks per node, N nodes:
//   reduce-scatter: the shm reduce-scatter of n bytes among m + the better of ring and halving
//                   of n/m bytes among N (with m ranks sharing each node's link: β·m);
//   all-gather:     the same with the all-gathers, + n/m·β_shm (the own part copied into place).

#include <algorithm>
#include <cstring>
#include <string>

#include "algorithms.hpp"
#include "hpctrain/base/error.hpp"

namespace hpctrain::coll::detail {

std::vector<int> NodeGroup::inter_members(int q) const {
  std::vector<int> ranks;
  ranks.reserve(members.size());
  for (const auto& node : members) ranks.push_back(node[static_cast<std::size_t>(q)]);
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}

namespace {

void require_uniform(const char* op, const NodeGroup& node) {
  // Communicator::Impl::resolve_scatter_gather refuses unequal nodes with the sizes, before any
  // message; this guards the layout below.
  HPCTRAIN_REQUIRE(node.uniform(), std::string(op) + "(hierarchical): nodes of unequal size");
}

/// Part q: the blocks of q's inter group, in inter-rank order; `sub` (this rank's part): the
/// offsets of those blocks within it.
struct HierarchicalLayout {
  NodeParts parts;
  std::vector<std::size_t> sub;
  std::vector<int> mine;  ///< communicator ranks of this rank's inter group
};

HierarchicalLayout layout_of(const NodeGroup& node, const std::vector<std::size_t>& offsets) {
  HierarchicalLayout l;
  const int m = node.local_size();
  l.parts.resize(static_cast<std::size_t>(m));
  for (int q = 0; q < m; ++q) {
    const std::vector<int> group = node.inter_members(q);
    for (int r : group) {
      const auto ur = static_cast<std::size_t>(r);
      l.parts[static_cast<std::size_t>(q)].push_back({offsets[ur], offsets[ur + 1] - offsets[ur]});
    }
    if (q == node.local_rank()) l.mine = group;
  }
  l.sub.assign(1, 0);
  for (const PartRange& r : l.parts[static_cast<std::size_t>(node.local_rank())]) l.sub.push_back(l.sub.back() + r.count);
  return l;
}

/// The part, in the node group's buffer (grown on demand, kept across calls).
std::byte* part_buffer(NodeGroup& node, std::size_t bytes) {
  if (node.part_scratch.size() < bytes) node.part_scratch.resize(bytes);
  return node.part_scratch.data();
}

/// The inter group's context: its own tag block per call (NodeGroup::inter_sequence), the same
/// count on every member because every member makes the same calls.
CollContext inter_context(CollContext& ctx, NodeGroup& node) {
  return CollContext{*node.inter, ctx.tuning, ctx.policy, sequence_tag(node.inter_sequence++), ctx.scratch};
}

}  // namespace

void hierarchical_reduce_scatter(CollContext& ctx, NodeGroup& node, const void* send, void* own,
                                 const std::vector<std::size_t>& offsets, DataType type, ReduceOp op) {
  if (!node.inter) {
    shm_reduce_scatter(ctx, node, send, own, block_parts(offsets), type, op);
    return;
  }
  require_uniform("reduce_scatter", node);
  const HierarchicalLayout l = layout_of(node, offsets);
  const std::size_t elem = size_of(type);
  std::byte* part = part_buffer(node, l.sub.back() * elem);
  shm_reduce_scatter(ctx, node, send, part, l.parts, type, op);
  const int j = node.inter->rank();
  if (node.inter->size() > 1 && l.sub.back() > 0) {
    CollContext inter_ctx = inter_context(ctx, node);
    // One rank per node in the inter group: the choice is between ring and halving.
    if (ctx.tuning.choose_reduce_scatter(l.sub.back() * elem, node.inter->size(), 1) == Algorithm::rabenseifner)
      halving_reduce_scatter(inter_ctx, part, part, l.sub, type, op);
    else
      ring_reduce_scatter(inter_ctx, part, part, l.sub, type, op);
  }
  const auto uj = static_cast<std::size_t>(j);
  std::memcpy(own, part + l.sub[uj] * elem, (l.sub[uj + 1] - l.sub[uj]) * elem);
}

void hierarchical_allgather(CollContext& ctx, NodeGroup& node, void* buf, const std::vector<std::size_t>& offsets,
                            DataType type) {
  auto* data = static_cast<std::byte*>(buf);
  const std::size_t elem = size_of(type);
  if (!node.inter) {
    const int me = node.parent_rank[static_cast<std::size_t>(node.local_rank())];
    shm_allgather(ctx, node, data + offsets[static_cast<std::size_t>(me)] * elem, buf, block_parts(offsets), type);
    return;
  }
  require_uniform("allgather", node);
  const HierarchicalLayout l = layout_of(node, offsets);
  const int j = node.inter->rank();
  const auto uj = static_cast<std::size_t>(j);
  std::byte* part = part_buffer(node, l.sub.back() * elem);
  const std::size_t own_first = offsets[static_cast<std::size_t>(l.mine[uj])];
  std::memcpy(part + l.sub[uj] * elem, data + own_first * elem, (l.sub[uj + 1] - l.sub[uj]) * elem);
  if (node.inter->size() > 1 && l.sub.back() > 0) {
    CollContext inter_ctx = inter_context(ctx, node);
    if (ctx.tuning.choose_allgather(l.sub.back() * elem, node.inter->size(), 1) == Algorithm::rabenseifner)
      doubling_allgather(inter_ctx, part, l.sub, type);
    else
      ring_allgather(inter_ctx, part, l.sub, type);
  }
  shm_allgather(ctx, node, part, buf, l.parts, type);
  const auto& ranges = l.parts[static_cast<std::size_t>(node.local_rank())];
  for (std::size_t i = 0; i < ranges.size(); ++i)
    if (i != uj) std::memcpy(data + ranges[i].first * elem, part + l.sub[i] * elem, ranges[i].count * elem);
}

}  // namespace hpctrain::coll::detail
