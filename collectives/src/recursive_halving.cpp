// Recursive-halving reduce-scatter and recursive-doubling all-gather over the blocks of
// `offsets` (block r belongs to rank r): the reduce_scatter / allgather forms of Rabenseifner's
// two halves (Thakur, Rabenseifner & Gropp 2005, section 4), for latency-bound vectors.
//
// Schedule (p = 2^k). Rank r starts with the blocks [0, p).
//  * Reduce-scatter, masks 2^(k-1) .. 1: rank r pairs with r XOR mask, which holds the same
//    range of blocks; the lower rank keeps the lower half of the range, the upper the upper
//    half; each sends the half it gives up and combines the half it keeps with the partner's
//    copy (exchange_reduce, in segments of Tuning::rabenseifner_segment_bytes). The highest
//    mask goes first so that after k steps rank r holds block r itself (Rabenseifner's
//    all-reduce goes lowest mask first and ends with a bit-reversed, element-split range).
//  * All-gather, masks 1 .. 2^(k-1): the reverse; each rank sends the blocks it holds and
//    receives the partner's, next to them, straight into place.
//
// Any p (PowerOfTwoFold: p' = 2^floor(lg p), r = p - p'). Number n of the p' ranks that take
// part speaks for the blocks [v(n), v(n+1)) with v(n) = 2n for n < r (its own and its folded
// partner's), n + r otherwise: contiguous, in rank order, so the schedule above runs over these
// groups of blocks. Reduce-scatter: rank 2i hands its whole vector to 2i+1 first (2i+1 reduces
// it into its own) and receives its reduced block from 2i+1 at the end. All-gather: 2i hands its
// block to 2i+1 first and receives every other block from 2i+1 at the end.
//
// Cost per rank, n bytes in all (p blocks), p = 2^k: reduce-scatter lg p·α + (p-1)/p·nβ +
// (p-1)/p·nγ, all-gather lg p·α + (p-1)/p·nβ: the ring's byte terms with lg p latency terms
// instead of p-1. Otherwise p' for p, plus the fold: reduce-scatter 2α + (n + n/p)β + nγ,
// all-gather 2α + (n/p + n)β (cost_model.cpp). Messages of zero elements are not sent (both
// sides compute the same lengths).

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "algorithms.hpp"

namespace hpctrain::coll::detail {

namespace {

constexpr Tag kFoldTag = 1;      // 2i -> 2i+1: the vector (reduce-scatter) or block (all-gather) of a rank that sits out
constexpr Tag kHalvingTag = 2;   // reduce-scatter exchanges
constexpr Tag kDoublingTag = 3;  // all-gather exchanges
constexpr Tag kUnfoldTag = 4;    // 2i+1 -> 2i: its reduced block (reduce-scatter) or the other blocks (all-gather)

/// The element offsets of the p' groups of blocks: group n is elements [at(n), at(n+1)).
struct Groups {
  const std::vector<std::size_t>& offsets;
  const PowerOfTwoFold& fold;
  std::size_t at(int n) const {
    const int block = n < fold.extra ? 2 * n : n + fold.extra;
    return offsets[static_cast<std::size_t>(block)];
  }
};

void post_if(std::vector<Request>& reqs, bool send, Transport& t, std::byte* at, std::size_t bytes, int peer, Tag tag) {
  if (bytes == 0) return;
  reqs.push_back(send ? t.isend(at, bytes, peer, tag) : t.irecv(at, bytes, peer, tag));
}

}  // namespace

void halving_reduce_scatter(CollContext& ctx, const void* send, void* buf, const std::vector<std::size_t>& offsets,
                            DataType type, ReduceOp op) {
  Transport& t = ctx.transport;
  const int p = t.size(), rank = t.rank();
  const std::size_t elem = size_of(type);
  const std::size_t count = offsets[static_cast<std::size_t>(p)];
  const auto* input = static_cast<const std::byte*>(send);
  auto* data = static_cast<std::byte*>(buf);
  const std::size_t own_begin = offsets[static_cast<std::size_t>(rank)];
  const std::size_t own_end = offsets[static_cast<std::size_t>(rank) + 1];
  if (p == 1) {
    if (send != buf) std::memcpy(data + own_begin * elem, input + own_begin * elem, (own_end - own_begin) * elem);
    return;
  }
  const PowerOfTwoFold fold(rank, p);
  const Groups groups{offsets, fold};
  const std::size_t seg = std::max<std::size_t>(1, ctx.tuning.rabenseifner_segment_bytes / elem);
  std::vector<Request> reqs;

  if (fold.newrank < 0) {  // even rank of a folded pair: hand over, then receive its block
    exchange_reduce(ctx, rank + 1, ctx.base_tag | kFoldTag, input, count, nullptr, nullptr, 0, seg, nullptr, type,
                    op);
    post_if(reqs, false, t, data + own_begin * elem, (own_end - own_begin) * elem, rank + 1, ctx.base_tag | kUnfoldTag);
    wait_all(t, reqs, ctx.policy);
    return;
  }

  std::byte* scratch = ctx.scratch_bytes(kExchangeWindow * std::min(seg, count) * elem);
  const std::byte* current = input;  // the partial result: the input until the first reduction
  if (fold.folded(rank)) {
    exchange_reduce(ctx, rank - 1, ctx.base_tag | kFoldTag, nullptr, 0, data, input, count, seg, scratch, type, op);
    current = data;
  }
  int lo = 0, hi = fold.pof2;  // the groups this rank holds
  for (int mask = fold.pof2 / 2; mask >= 1; mask >>= 1) {
    const int partner = fold.newrank ^ mask;
    const int mid = lo + mask;
    const bool lower = fold.newrank < partner;
    const std::size_t keep_begin = groups.at(lower ? lo : mid), keep_end = groups.at(lower ? mid : hi);
    const std::size_t give_begin = groups.at(lower ? mid : lo), give_end = groups.at(lower ? hi : mid);
    exchange_reduce(ctx, fold.rank_of(partner), ctx.base_tag | kHalvingTag, current + give_begin * elem,
                    give_end - give_begin, data + keep_begin * elem, current + keep_begin * elem,
                    keep_end - keep_begin, seg, scratch, type, op);
    current = data;
    if (lower) hi = mid;
    else lo = mid;
  }
  if (fold.folded(rank)) {  // the partner's block goes back to it
    const std::size_t b = offsets[static_cast<std::size_t>(rank) - 1];
    post_if(reqs, true, t, data + b * elem, (own_begin - b) * elem, rank - 1, ctx.base_tag | kUnfoldTag);
    wait_all(t, reqs, ctx.policy);
  }
}

void doubling_allgather(CollContext& ctx, void* buf, const std::vector<std::size_t>& offsets, DataType type) {
  Transport& t = ctx.transport;
  const int p = t.size(), rank = t.rank();
  if (p == 1) return;
  const std::size_t elem = size_of(type);
  const std::size_t count = offsets[static_cast<std::size_t>(p)];
  auto* data = static_cast<std::byte*>(buf);
  const std::size_t own_begin = offsets[static_cast<std::size_t>(rank)];
  const std::size_t own_end = offsets[static_cast<std::size_t>(rank) + 1];
  const PowerOfTwoFold fold(rank, p);
  const Groups groups{offsets, fold};
  std::vector<Request> reqs;
  const Tag unfold = ctx.base_tag | kUnfoldTag;

  if (fold.newrank < 0) {  // even rank of a folded pair: hand over its block, receive the rest
    post_if(reqs, true, t, data + own_begin * elem, (own_end - own_begin) * elem, rank + 1, ctx.base_tag | kFoldTag);
    post_if(reqs, false, t, data, own_begin * elem, rank + 1, unfold);
    post_if(reqs, false, t, data + own_end * elem, (count - own_end) * elem, rank + 1, unfold);
    wait_all(t, reqs, ctx.policy);
    return;
  }
  if (fold.folded(rank)) {
    const std::size_t b = offsets[static_cast<std::size_t>(rank) - 1];
    post_if(reqs, false, t, data + b * elem, (own_begin - b) * elem, rank - 1, ctx.base_tag | kFoldTag);
    wait_all(t, reqs, ctx.policy);
    reqs.clear();
  }
  int lo = fold.newrank, hi = fold.newrank + 1;  // the groups this rank holds
  for (int mask = 1; mask < fold.pof2; mask <<= 1) {
    const int partner = fold.newrank ^ mask;
    const bool lower = fold.newrank < partner;
    const int theirs_lo = lower ? hi : lo - mask, theirs_hi = lower ? hi + mask : lo;
    const std::size_t mine_begin = groups.at(lo), mine_end = groups.at(hi);
    const std::size_t theirs_begin = groups.at(theirs_lo), theirs_end = groups.at(theirs_hi);
    const int peer = fold.rank_of(partner);
    post_if(reqs, false, t, data + theirs_begin * elem, (theirs_end - theirs_begin) * elem, peer,
            ctx.base_tag | kDoublingTag);
    post_if(reqs, true, t, data + mine_begin * elem, (mine_end - mine_begin) * elem, peer, ctx.base_tag | kDoublingTag);
    wait_all(t, reqs, ctx.policy);
    reqs.clear();
    lo = std::min(lo, theirs_lo);
    hi = std::max(hi, theirs_hi);
  }
  if (fold.folded(rank)) {  // everything but the partner's own block goes back to it
    const std::size_t b = offsets[static_cast<std::size_t>(rank) - 1];
    post_if(reqs, true, t, data, b * elem, rank - 1, unfold);
    post_if(reqs, true, t, data + own_begin * elem, (count - own_begin) * elem, rank - 1, unfold);
    wait_all(t, reqs, ctx.policy);
  }
}

}  // namespace hpctrain::coll::detail
