#pragma once
// The algorithms, each written once against Transport. One file per algorithm; the single
// dispatch point is Communicator (communicator.cpp).

#include <cstddef>
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

/// Balanced partition of `count` elements into `parts` contiguous blocks: offsets[0..parts].
std::vector<std::size_t> balanced_offsets(std::size_t count, int parts);

// All-reduce (op is never avg here: the dispatcher scales). The ring reads `send` and writes
// `recv` (send == recv is in place); the tree works in place on `buf`.
void ring_allreduce(CollContext& ctx, const void* send, void* recv, std::size_t count, DataType type,
                    ReduceOp op);
void tree_allreduce(CollContext& ctx, void* buf, std::size_t count, DataType type, ReduceOp op);
/// In place on `buf`; any rank count (non-powers of two as in Thakur, Rabenseifner & Gropp 2005).
void recursive_doubling_allreduce(CollContext& ctx, void* buf, std::size_t count, DataType type,
                                  ReduceOp op);
/// Reads `send`, writes `recv` (send == recv is in place), as the ring: the input is never
/// copied into the output first. Any rank count, as recursive_doubling_allreduce.
void rabenseifner_allreduce(CollContext& ctx, const void* send, void* recv, std::size_t count,
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

/// Binomial-tree broadcast of `bytes` bytes from `root`.
void binomial_broadcast(CollContext& ctx, void* buf, std::size_t bytes, int root);
/// Dissemination barrier: ceil(lg p) rounds of zero-byte messages.
void dissemination_barrier(CollContext& ctx);

}  // namespace hpctrain::coll::detail
