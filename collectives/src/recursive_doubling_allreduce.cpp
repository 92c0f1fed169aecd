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
// Memory: one vector of scratch. The first step reads `send` where it lies (the first reduction
// writes its result into `recv` or the scratch), so the input is never copied into the output
// first. Each exchange receives into whichever of {recv, scratch} does not hold the current
// partial result, and the upper partner's result lands in the received buffer, so no step
// copies; at most one copy into `recv` at the end.

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

void recursive_doubling_allreduce(CollContext& ctx, const void* send, void* recv, std::size_t count,
                                  DataType type, ReduceOp op) {
  Transport& t = ctx.transport;
  const int p = t.size(), rank = t.rank();
  const std::size_t bytes = count * size_of(type);
  const auto* in = static_cast<const std::byte*>(send);
  auto* data = static_cast<std::byte*>(recv);
  if (p == 1 || count == 0) {
    if (in != data && bytes) std::memcpy(data, in, bytes);
    return;
  }
  const PowerOfTwoFold fold(rank, p);

  if (fold.newrank < 0) {  // even rank of a folded pair: hand over, wait for the result
    Request handed = t.isend(in, bytes, rank + 1, ctx.base_tag | kFoldTag);
    wait_all(t, &handed, 1, ctx.policy);  // `data` is then free to receive into (when in place)
    Request result = t.irecv(data, bytes, rank + 1, ctx.base_tag | kUnfoldTag);
    wait_all(t, &result, 1, ctx.policy);
    return;
  }

  std::byte* scratch = ctx.scratch_bytes(bytes);
  // The partial result: `send` until the first reduction, then `data` or `scratch`. Each
  // exchange receives into the one of those two that does not hold it.
  const std::byte* current = in;
  auto incoming_buffer = [&] { return current == scratch ? data : scratch; };
  if (fold.folded(rank)) {
    std::byte* other = incoming_buffer();
    Request handed = t.irecv(other, bytes, rank - 1, ctx.base_tag | kFoldTag);
    wait_all(t, &handed, 1, ctx.policy);
    reduce_into(other, current, count, type, op);  // lower rank's vector first
    current = other;
  }
  const Tag tag = ctx.base_tag | kExchangeTag;
  for (int mask = 1; mask < fold.pof2; mask <<= 1) {
    const int partner = fold.newrank ^ mask;
    const int peer = fold.rank_of(partner);
    std::byte* other = incoming_buffer();
    std::array<Request, 2> reqs = {t.irecv(other, bytes, peer, tag), t.isend(current, bytes, peer, tag)};
    wait_all(t, reqs.data(), reqs.size(), ctx.policy);
    if (fold.newrank < partner) {
      // op(mine, theirs) into `data` (in place when `current` is already `data` or `scratch`:
      // reduce_to with out == a is reduce_into).
      std::byte* out = current == in && in != data ? data : const_cast<std::byte*>(current);
      reduce_to(out, current, other, count, type, op);
      current = out;
    } else {
      reduce_into(other, current, count, type, op);
      current = other;
    }
  }
  if (fold.folded(rank)) {  // the result goes back to the rank that sat out
    Request result = t.isend(current, bytes, rank - 1, ctx.base_tag | kUnfoldTag);
    if (current != data) std::memcpy(data, current, bytes);  // overlaps the send
    wait_all(t, &result, 1, ctx.policy);
  } else if (current != data) {
    std::memcpy(data, current, bytes);
  }
}

}  // namespace hpctrain::coll::detail
