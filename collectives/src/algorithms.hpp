#pragma once
// The algorithms, each written once against Transport. One file per algorithm; the single
// dispatch point is dispatch.cpp.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "hpctrain/collectives/transport.hpp"
#include "hpctrain/collectives/tuning.hpp"
#include "hpctrain/collectives/types.hpp"

namespace hpctrain::coll::detail {

/// What every algorithm call gets: the transport, the knobs, the wait policy (timeout and
/// diagnostic name), the tag block of this collective and scratch memory that outlives calls.
struct CollContext {
  Transport& transport;
  const Tuning& tuning;
  const WaitPolicy& policy;
  Tag base_tag;                      ///< low 8 bits free for the algorithm's phases
  std::vector<std::byte>& scratch;   ///< grown on demand, reused across calls

  std::byte* scratch_bytes(std::size_t bytes) {
    if (scratch.size() < bytes) scratch.resize(bytes);
    return scratch.data();
  }
};

/// The tag block of collective number `sequence`: 20 bits of sequence number above 8 bits of
/// per-algorithm phase, so tags stay below 2^28.
inline Tag sequence_tag(std::uint64_t sequence) { return static_cast<Tag>((sequence & 0xfffffu) << 8); }

/// This rank's (virtual) node, for the shm and hierarchical algorithms: built once per
/// communicator on first use (collective) and reused by every later call, so the shared
/// memory is allocated once and its progress counters run on across calls.
struct NodeGroup {
  std::unique_ptr<Transport> local;         ///< the ranks of this node
  std::unique_ptr<Transport> inter;         ///< this local rank on every node; null on one node
  std::unique_ptr<SharedSegments> memory;   ///< one segment per local rank (layout: shm_allreduce.cpp)
  std::vector<int> parent_rank;             ///< communicator rank of each local rank (diagnostics)
  /// Communicator ranks of every node (its local ranks in order), nodes in order of first rank.
  std::vector<std::vector<int>> members;
  /// The hierarchical reduce-scatter / all-gather's part (n / ranks-per-node bytes), kept across
  /// calls (CollContext::scratch is the inner ring's / halving's).
  std::vector<std::byte> part_scratch;
  int nodes = 1;
  /// Ranks of the smallest node: local ranks below it own one slice each (nodes may differ in
  /// size, e.g. 4 ranks in virtual nodes of 3; every node must slice the buffer alike).
  int slices = 1;
  std::size_t segment_bytes = 0;            ///< bytes of each of the two staging buffers
  std::uint64_t next_segment = 0;           ///< segments (steps) this node has started
  std::uint64_t inter_sequence = 0;         ///< inter-node all-reduces issued (their tags)
  bool broken = false;                      ///< a call failed part-way: the counters disagree

  int local_rank() const noexcept { return local->rank(); }
  int local_size() const noexcept { return local->size(); }
  /// True when every node has the same number of ranks.
  bool uniform() const noexcept {
    for (const auto& m : members)
      if (m.size() != members.front().size()) return false;
    return true;
  }
  /// Communicator rank of each rank of the `inter` group of local rank q (the ranks with local
  /// rank q, in communicator-rank order: the order of Transport::split's key). Uniform nodes.
  std::vector<int> inter_members(int q) const;
};

/// The elements of a vector one local rank owns in the shm reduce-scatter / all-gather, as
/// ranges whose concatenation is its part: one block for shm; for hierarchical, the blocks of
/// the ranks of its `inter` group, in their order.
struct PartRange {
  std::size_t first = 0, count = 0;
};
using NodeParts = std::vector<std::vector<PartRange>>;  ///< [local rank]
/// One block per local rank: part q is elements [offsets[q], offsets[q+1]).
NodeParts block_parts(const std::vector<std::size_t>& offsets);
/// Elements in a part.
std::size_t part_length(const std::vector<PartRange>& part) noexcept;

/// Bytes of shared memory each local rank needs for `segment_bytes` staging buffers.
std::size_t shm_bytes_per_rank(std::size_t segment_bytes);
/// Initialises this rank's progress counter in `node.memory`, then a barrier over node.local
/// (point-to-point), after which every rank may use every counter. Collective over the node.
void shm_prepare(CollContext& local_ctx, NodeGroup& node);

/// Called by the owner of each reduced slice between the intra-node reduction and the copy-out
/// (the hierarchical algorithm's inter-node step); `slice` lies in shared memory.
using SliceStep = std::function<void(void* slice, std::size_t count)>;

/// Single-copy all-reduce over the node's shared memory (all ranks of ctx on one node).
void shm_allreduce(CollContext& ctx, NodeGroup& node, const void* send, void* recv,
                   std::size_t count, DataType type, ReduceOp op);
/// The segmented schedule of shm_allreduce, with `between` (if set) run on each owned slice.
void shm_segmented_allreduce(CollContext& ctx, NodeGroup& node, const void* send, void* recv,
                             std::size_t count, DataType type, ReduceOp op, const SliceStep& between);
/// Single-copy reduce-scatter over the node's shared memory (shm_scatter_gather.cpp) among the
/// node's ranks, part q of `send` owned by local rank q: writes the reduction of this rank's
/// part, contiguous, to `own` (part_length(parts[me]) elements; for one-block parts `own` may
/// lie in `send`, at that block, for the in-place form) and nothing else.
void shm_reduce_scatter(CollContext& ctx, NodeGroup& node, const void* send, void* own, const NodeParts& parts,
                        DataType type, ReduceOp op);
/// Single-copy all-gather over the node's shared memory: `own` holds this rank's part,
/// contiguous (for one-block parts it may be that block of `buf`); afterwards every other local
/// rank's part is in place in `buf` (this rank's own part is not written).
void shm_allgather(CollContext& ctx, NodeGroup& node, const void* own, void* buf, const NodeParts& parts,
                   DataType type);
/// Reduce-scatter over the communicator's blocks (offsets indexed by communicator rank):
/// intra-node shm reduce-scatter of the blocks of each inter group, then a reduce-scatter among
/// the inter group (hierarchical_scatter_gather.cpp). Writes this rank's reduced block to `own`
/// (which may be that block of `send`) and nothing else. Nodes of equal size.
void hierarchical_reduce_scatter(CollContext& ctx, NodeGroup& node, const void* send, void* own,
                                 const std::vector<std::size_t>& offsets, DataType type, ReduceOp op);
/// All-gather over the communicator's blocks, the reverse: inter-group all-gather, then intra-node
/// shm all-gather. The contract of ring_allgather. Nodes of equal size.
void hierarchical_allgather(CollContext& ctx, NodeGroup& node, void* buf, const std::vector<std::size_t>& offsets,
                            DataType type);
/// Intra-node reduce-scatter, inter-node all-reduce of each slice, intra-node all-gather.
void hierarchical_allreduce(CollContext& ctx, NodeGroup& node, const void* send, void* recv,
                            std::size_t count, DataType type, ReduceOp op);

/// Balanced partition of `count` elements into `parts` contiguous blocks: offsets[0..parts].
std::vector<std::size_t> balanced_offsets(std::size_t count, int parts);

// All-reduce (op is never avg here: the dispatcher scales). Every algorithm reads `send` and
// writes `recv` (send == recv is in place); none copies the input into the output first: the
// first step reads `send` where it lies.
void ring_allreduce(CollContext& ctx, const void* send, void* recv, std::size_t count, DataType type,
                    ReduceOp op);
void tree_allreduce(CollContext& ctx, const void* send, void* recv, std::size_t count, DataType type,
                    ReduceOp op);
/// Any rank count (non-powers of two as in Thakur, Rabenseifner & Gropp 2005).
void recursive_doubling_allreduce(CollContext& ctx, const void* send, void* recv, std::size_t count,
                                  DataType type, ReduceOp op);
/// Any rank count, as recursive_doubling_allreduce.
void rabenseifner_allreduce(CollContext& ctx, const void* send, void* recv, std::size_t count,
                            DataType type, ReduceOp op);
/// Segment receives in flight per exchange_reduce: enough that one segment is always arriving
/// while another is reduced (as the double binary tree's window).
inline constexpr std::size_t kExchangeWindow = 4;
/// One exchange with `peer` (rabenseifner_allreduce.cpp; also the halving reduce-scatter and its
/// folds): sends `give` elements from `give_from`, and receives `keep` elements, writing
/// out[i] = keep_from[i] ⊕ incoming[i] (out may equal keep_from). Both move in segments of `seg`
/// elements with up to kExchangeWindow receives posted, into `scratch` (kExchangeWindow × seg
/// elements; null when keep == 0).
void exchange_reduce(CollContext& ctx, int peer, Tag tag, const std::byte* give_from, std::size_t give,
                     std::byte* out, const std::byte* keep_from, std::size_t keep, std::size_t seg,
                     std::byte* scratch, DataType type, ReduceOp op);

/// The dispatch of the point-to-point algorithms (ring, tree, recursive doubling, Rabenseifner),
/// `send` == `recv` in place; used by Communicator and by the hierarchical algorithm's
/// inter-node step. Defined in dispatch.cpp, the one dispatch point.
void point_to_point_allreduce(CollContext& ctx, Algorithm algo, const void* send, void* recv, std::size_t count,
                              DataType type, ReduceOp op);

/// Runs a power-of-two schedule on any rank count p (Thakur, Rabenseifner & Gropp 2005): with
/// p' = 2^floor(lg p) and r = p - p', the first 2r ranks pair up as (2i, 2i+1); the even one
/// hands its vector to the odd one and sits out until the result comes back. The p' ranks that
/// take part are renumbered 0..p'-1 in rank order (odd ranks below 2r, then every rank from 2r).
struct PowerOfTwoFold {
  int pof2 = 1;      ///< p'
  int extra = 0;     ///< r = p - p'
  int newrank = -1;  ///< this rank's number among the p' (-1: it sits out)

  PowerOfTwoFold(int rank, int p) {
    while (pof2 * 2 <= p) pof2 *= 2;
    extra = p - pof2;
    if (rank < 2 * extra) newrank = rank % 2 == 1 ? rank / 2 : -1;
    else newrank = rank - extra;
  }
  /// True for ranks below 2r: each has a partner (rank ^ 1) in the fold.
  bool folded(int rank) const noexcept { return rank < 2 * extra; }
  /// The rank of number `n` among the p'.
  int rank_of(int n) const noexcept { return n < extra ? 2 * n + 1 : n + extra; }
};

// Ring phases, also used on their own by reduce_scatter and allgather. Block b of `buf` is
// elements [offsets[b], offsets[b+1]).
/// Afterwards block rank() of `buf` holds the reduction of every rank's block rank() of `send`.
/// `send` may be `buf`; otherwise `buf` need not be initialised (every block it reads was
/// written first) and its blocks other than rank()'s hold partial reductions.
void ring_reduce_scatter(CollContext& ctx, const void* send, void* buf,
                         const std::vector<std::size_t>& offsets, DataType type, ReduceOp op);
/// Before: block rank() holds this rank's data. Afterwards every block holds its owner's data.
void ring_allgather(CollContext& ctx, void* buf, const std::vector<std::size_t>& offsets,
                    DataType type);

// Recursive halving / doubling over the same blocks (recursive_halving.cpp): the same
// contracts as ring_reduce_scatter / ring_allgather, any rank count (PowerOfTwoFold).
/// Afterwards block rank() of `buf` holds the reduction of every rank's block rank() of `send`
/// (`send` may be `buf`); lg p' exchanges, halving the blocks held each time.
void halving_reduce_scatter(CollContext& ctx, const void* send, void* buf,
                            const std::vector<std::size_t>& offsets, DataType type, ReduceOp op);
/// Before: block rank() holds this rank's data. Afterwards every block holds its owner's data;
/// lg p' exchanges, doubling the blocks held each time.
void doubling_allgather(CollContext& ctx, void* buf, const std::vector<std::size_t>& offsets, DataType type);

/// Binomial-tree broadcast of `bytes` bytes from `root`.
void binomial_broadcast(CollContext& ctx, void* buf, std::size_t bytes, int root);
/// Dissemination barrier: ceil(lg p) rounds of zero-byte messages.
void dissemination_barrier(CollContext& ctx);
/// Communicator::exchange: every receive posted first, then the sends, then one wait for all.
void sparse_exchange(CollContext& ctx, const std::vector<PeerBuffer>& sends, const std::vector<PeerBuffer>& recvs);

}  // namespace hpctrain::coll::detail
