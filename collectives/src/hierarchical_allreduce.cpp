// Hierarchical all-reduce: intra-node reduce-scatter through shared memory, inter-node
// all-reduce of each slice among the ranks that hold it, intra-node all-gather (as Horovod's
// hierarchical mode, with the intra-node phases single-copy instead of through the library).
//
// Topology (Communicator::node_group). Ranks are grouped into nodes: the machines
// (Transport::shared_memory_domains) or, with HPCTRAIN_RANKS_PER_NODE=k, consecutive blocks of
// k ranks (virtual nodes, so one machine can exercise the multi-node path). `local` holds the
// ranks of this node, `inter` the ranks with the same local rank on every node. Nodes may have
// different sizes; the buffer is cut into S = (ranks of the smallest node) slices, so every
// node slices alike, and local ranks >= S own no slice.
//
// Schedule, per segment of Tuning::shm_segment_bytes (the schedule of shm_allreduce.cpp, whose
// comment has the memory-ordering argument):
//  1. every local rank stages its segment in its shared-memory buffer; flag wait A;
//  2. local rank l < S reduces slice l of the segment from every local buffer (intra-node
//     reduce-scatter, single copy) into its own buffer, then all-reduces that slice with the
//     ranks of its `inter` group, in place in shared memory, with the point-to-point algorithm
//     (ring, tree, recursive doubling, Rabenseifner) the cost model (Tuning::predict_allreduce_s)
//     rates fastest for the slice over N nodes of one rank each. All S local ranks run their
//     inter-node all-reduces at the same time, so every node's S links carry traffic;
//  3. flag wait B; every local rank copies every slice out (intra-node all-gather).
// One node (N = 1): exactly shm_allreduce, including its one-step small-message path.
//
// Cost per rank, n bytes, N nodes, m ranks per node, segment s: the shm cost
//   2⌈n/s⌉·α_f + (m-1)/m·n·(β+γ) + n·β
// plus, per segment, an inter-node all-reduce of s/m bytes among N ranks:
//   ring: 2(N-1)·α + 2(N-1)/N·(n/m)·β_net + (N-1)/N·(n/m)·γ  summed over segments;
// the inter-node volume per rank is 1/m of a flat ring's, and the α terms grow with N, not p.
// The inter-node all-reduces of consecutive segments run one after the other (tags from
// NodeGroup::inter_sequence), so their latency is paid ⌈n/s⌉ times.

#include "algorithms.hpp"
#include "hpctrain/base/error.hpp"

namespace hpctrain::coll::detail {

void hierarchical_allreduce(CollContext& ctx, NodeGroup& node, const void* send, void* recv,
                            std::size_t count, DataType type, ReduceOp op) {
  if (count == 0) return;
  if (!node.inter) {  // one node: nothing crosses a node boundary
    shm_allreduce(ctx, node, send, recv, count, type, op);
    return;
  }
  const std::size_t elem = size_of(type);
  const SliceStep across_nodes = [&](void* slice, std::size_t n) {
    // Every member of the inter group owns the same slice of the same segment, so all of them
    // skip empty slices alike.
    if (n == 0 || node.inter->size() == 1) return;
    CollContext inter_ctx{*node.inter, ctx.tuning, ctx.policy, sequence_tag(node.inter_sequence++),
                          ctx.scratch};
    // The same on every member (same n, same group size, same tuning), so they agree.
    constexpr auto bit = [](Algorithm a) { return 1u << static_cast<unsigned>(a); };
    const std::uint32_t point_to_point =
        bit(Algorithm::ring) | bit(Algorithm::tree) | bit(Algorithm::recursive_doubling) | bit(Algorithm::rabenseifner);
    const Algorithm best = ctx.tuning.cheapest_allreduce(n * elem, node.inter->size(), 1,
                                                         ctx.tuning.auto_algorithms & point_to_point);
    point_to_point_allreduce(inter_ctx, best, slice, slice, n, type, op);
  };
  shm_segmented_allreduce(ctx, node, send, recv, count, type, op, across_nodes);
}

}  // namespace hpctrain::coll::detail
