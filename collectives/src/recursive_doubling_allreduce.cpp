// Recursive-doubling all-reduce: lg p exchanges of the whole vector.
//
// Schedule (p = 2^k). In step s = 0..k-1 rank r exchanges its whole partial result with rank
// r XOR 2^s and combines the two. After step s every rank holds the reduction over its group of
// 2^(s+1) ranks; after k steps, over all p. Both partners of an exchange compute
// op(lower rank's partial, upper rank's partial), so every rank ends with the same bits, even
// for min/max with NaN or ±0 (reduce_to is not symmetric in those cases).
//
// Any p (Thakur, Rabenseifner & Gropp 2005, see PowerOfTwoFold): with p' = 2^floor(lg p) and
// r = p - p', ranks 2i < 2r send their vector to 2i+1, which combines it with its own; the p'
// remaining ranks run the schedule above; then each 2i+1 sends the result back to 2i.
//
// Cost per rank: lg p · (α + n·β + n·γ) for p = 2^k; otherwise (lg p' + 2)·(α + n·β) +
// (lg p' + 1)·n·γ. Latency-optimal (no all-reduce needs fewer than ⌈lg p⌉ steps), but every step
// moves the whole vector, lg p times the ring's bandwidth term at large p: for small messages.
//
// Memory: one vector of scratch. The exchange receives into whichever of {buf, scratch} does not
// hold the current partial result, and the upper partner's result lands in the received buffer,
// so no step copies; at most one copy back into `buf` at the end.

#include <array>
#include <cstring>
#include <utility>

#include "algorithms.hpp"
#include "reduce.hpp"

namespace hpctrain::coll::detail {

namespace {

constexpr Tag kFoldTag = 1;      // 2i -> 2i+1: the vector of a rank that sits out
constexpr Tag kExchangeTag = 2;  // the lg p' exchanges
constexpr Tag kUnfoldTag = 3;    // 2i+1 -> 2i: the result

}  // namespace

void recursive_doubling_allreduce(CollContext& ctx, void* buf, std::size_t count, DataType type,
                                  ReduceOp op) {
  Transport& t = ctx.transport;
  const int p = t.size(), rank = t.rank();
  if (p == 1 || count == 0) return;
  const std::size_t bytes = count * size_of(type);
  const PowerOfTwoFold fold(rank, p);
  auto* data = static_cast<std::byte*>(buf);

  if (fold.newrank < 0) {  // even rank of a folded pair: hand over, wait for the result
    Request send = t.isend(data, bytes, rank + 1, ctx.base_tag | kFoldTag);
    wait_all(t, &send, 1, ctx.policy);  // `data` is then free to receive into
    Request recv = t.irecv(data, bytes, rank + 1, ctx.base_tag | kUnfoldTag);
    wait_all(t, &recv, 1, ctx.policy);
    return;
  }

  std::byte* current = data;                   // holds this rank's partial result
  std::byte* other = ctx.scratch_bytes(bytes);  // receives the partner's
  if (fold.folded(rank)) {
    Request recv = t.irecv(other, bytes, rank - 1, ctx.base_tag | kFoldTag);
    wait_all(t, &recv, 1, ctx.policy);
    reduce_into(other, current, count, type, op);  // lower rank's vector first
    std::swap(current, other);
  }
  const Tag tag = ctx.base_tag | kExchangeTag;
  for (int mask = 1; mask < fold.pof2; mask <<= 1) {
    const int partner = fold.newrank ^ mask;
    const int peer = fold.rank_of(partner);
    std::array<Request, 2> reqs = {t.irecv(other, bytes, peer, tag), t.isend(current, bytes, peer, tag)};
    wait_all(t, reqs.data(), reqs.size(), ctx.policy);
    if (fold.newrank < partner) {
      reduce_into(current, other, count, type, op);
    } else {
      reduce_into(other, current, count, type, op);
      std::swap(current, other);
    }
  }
  if (fold.folded(rank)) {  // the result goes back to the rank that sat out
    Request send = t.isend(current, bytes, rank - 1, ctx.base_tag | kUnfoldTag);
    if (current != data) std::memcpy(data, current, bytes);  // overlaps the send
    wait_all(t, &send, 1, ctx.policy);
  } else if (current != data) {
    std::memcpy(data, current, bytes);
  }
}

}  // namespace hpctrain::coll::detail
