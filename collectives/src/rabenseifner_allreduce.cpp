// Rabenseifner all-reduce: recursive-halving reduce-scatter, then recursive-doubling all-gather
// (Rabenseifner 2004; Thakur, Rabenseifner & Gropp 2005).
//
// Schedule (p = 2^k). Every rank starts with the range [0, n) of the vector.
//  * Reduce-scatter, steps s = 0..k-1: rank r pairs with r XOR 2^s, which holds the same range.
//    The range is halved (the lower rank keeps the lower half, the upper rank the upper); each
//    rank sends the half it gives up and combines the half it keeps with the partner's copy of
//    it. After k steps each rank holds the full reduction of a range of about n/p elements.
//    The halves are split at the middle element, so any n works (n < p leaves some ranges
//    empty, and empty halves are not sent).
//  * All-gather, steps s = k-1..0: the exchanges of the reduce-scatter in reverse; each rank
//    sends the range it holds to the same partner and receives the partner's range next to it
//    (straight into place), doubling what it holds, until every rank holds [0, n).
// The largest exchanges (half the vector) are with the nearest rank (r XOR 1), which with the
// usual block placement of ranks on nodes stays inside a node.
//
// Any p (see PowerOfTwoFold): with p' = 2^floor(lg p) and r = p - p', rank 2i < 2r sends its
// vector to 2i+1, which combines it with its own; the p' ranks left run the schedule above; then
// 2i+1 sends the result back to 2i.
//
// Cost per rank, p = 2^k: 2 lg p · α + 2 (p-1)/p · n·β + (p-1)/p · n·γ: the ring's bandwidth
// and reduction terms with lg p instead of p-1 latency terms. Otherwise lg p' for lg p and
// p' for p, plus 2α + 2n·β + n·γ for the fold and the return of the result (the excluded ranks
// cost one whole vector each way, as in MPICH).
//
// Bandwidth. The halving exchanges (and the fold) travel in segments of
// Tuning::rabenseifner_segment_bytes with up to kWindow segment receives outstanding, so the
// reduction of one segment overlaps the transfer of the next and the scratch memory is
// kWindow segments, not half the vector. The input is read in place: the first exchange sends
// from `send` and writes recv = send ⊕ incoming, so out of place the input is never copied
// into the output first. The all-gather receives into the output directly.

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "algorithms.hpp"
#include "reduce.hpp"

namespace hpctrain::coll::detail {

namespace {

constexpr Tag kFoldTag = 1;       // 2i -> 2i+1: the vector of a rank that sits out
constexpr Tag kHalvingTag = 2;    // reduce-scatter exchanges
constexpr Tag kDoublingTag = 3;   // all-gather exchanges
constexpr Tag kUnfoldTag = 4;     // 2i+1 -> 2i: the result
constexpr std::size_t kWindow = kExchangeWindow;

/// Elements [begin, end) of the vector.
struct Range {
  std::size_t begin = 0, end = 0;
  std::size_t length() const { return end - begin; }
};

}  // namespace

void exchange_reduce(CollContext& ctx, int peer, Tag tag, const std::byte* give_from, std::size_t give,
                     std::byte* out, const std::byte* keep_from, std::size_t keep, std::size_t seg,
                     std::byte* scratch, DataType type, ReduceOp op) {
  Transport& t = ctx.transport;
  const std::size_t elem = size_of(type);
  auto segments = [&](std::size_t n) { return (n + seg - 1) / seg; };
  auto length = [&](std::size_t n, std::size_t k) { return std::min(seg, n - k * seg); };

  std::vector<Request> sends;
  sends.reserve(segments(give));
  for (std::size_t k = 0; k < segments(give); ++k) {
    sends.push_back(t.isend(give_from + k * seg * elem, length(give, k) * elem, peer, tag));
  }
  const std::size_t in_segments = segments(keep);
  const std::size_t window = std::min(kWindow, in_segments);
  std::array<Request, kWindow> recvs;
  std::array<std::size_t, kWindow> recv_segment{};
  std::size_t posted = 0, reduced = 0;
  auto post = [&](std::size_t slot) {
    recv_segment[slot] = posted;
    recvs[slot] = t.irecv(scratch + slot * seg * elem, length(keep, posted) * elem, peer, tag);
    ++posted;
  };
  for (std::size_t slot = 0; slot < window; ++slot) post(slot);
  while (reduced < in_segments) {
    const std::size_t slot = wait_any(t, recvs.data(), window, ctx.policy);
    const std::size_t at = recv_segment[slot] * seg * elem;
    reduce_to(out + at, keep_from + at, scratch + slot * seg * elem, length(keep, recv_segment[slot]), type, op);
    ++reduced;
    if (posted < in_segments) post(slot);
  }
  wait_all(t, sends, ctx.policy);
}

void rabenseifner_allreduce(CollContext& ctx, const void* send, void* recv, std::size_t count,
                            DataType type, ReduceOp op) {
  Transport& t = ctx.transport;
  const int p = t.size(), rank = t.rank();
  const std::size_t elem = size_of(type);
  const std::size_t bytes = count * elem;
  if (count == 0) return;
  if (p == 1) {
    if (send != recv) std::memcpy(recv, send, bytes);
    return;
  }
  const PowerOfTwoFold fold(rank, p);
  const auto* input = static_cast<const std::byte*>(send);
  auto* data = static_cast<std::byte*>(recv);

  const std::size_t seg = std::max<std::size_t>(1, ctx.tuning.rabenseifner_segment_bytes / elem);
  if (fold.newrank < 0) {  // even rank of a folded pair: hand over (in the partner's segments),
                           // then wait for the result
    exchange_reduce(ctx, rank + 1, ctx.base_tag | kFoldTag, input, count, nullptr, nullptr, 0, seg, nullptr,
                    type, op);
    Request in = t.irecv(data, bytes, rank + 1, ctx.base_tag | kUnfoldTag);
    wait_all(t, &in, 1, ctx.policy);
    return;
  }

  std::byte* scratch = ctx.scratch_bytes(kWindow * std::min(seg, count) * elem);
  // Where this rank's current partial result is read from: the input until the first
  // reduction has written the output.
  const std::byte* current = input;
  if (fold.folded(rank)) {
    exchange_reduce(ctx, rank - 1, ctx.base_tag | kFoldTag, nullptr, 0, data, input, count, seg, scratch,
                    type, op);
    current = data;
  }

  // Reduce-scatter by recursive halving; steps[s] remembers what step s kept and gave away.
  struct Step {
    int peer;
    Range kept, given;
  };
  std::array<Step, 32> steps;
  int step_count = 0;
  Range range{0, count};
  const Tag halving_tag = ctx.base_tag | kHalvingTag;
  for (int mask = 1; mask < fold.pof2; mask <<= 1) {
    const int partner = fold.newrank ^ mask;
    const std::size_t mid = range.begin + range.length() / 2;
    const Range lower{range.begin, mid}, upper{mid, range.end};
    Step& s = steps[static_cast<std::size_t>(step_count++)];
    s.peer = fold.rank_of(partner);
    s.kept = fold.newrank < partner ? lower : upper;
    s.given = fold.newrank < partner ? upper : lower;
    exchange_reduce(ctx, s.peer, halving_tag, current + s.given.begin * elem, s.given.length(),
                    data + s.kept.begin * elem, current + s.kept.begin * elem, s.kept.length(), seg, scratch,
                    type, op);
    current = data;
    range = s.kept;
  }

  // All-gather by recursive doubling: the same exchanges in reverse, straight into place.
  const Tag doubling_tag = ctx.base_tag | kDoublingTag;
  for (int i = step_count - 1; i >= 0; --i) {
    const Step& s = steps[static_cast<std::size_t>(i)];
    std::array<Request, 2> reqs;
    std::size_t n = 0;
    if (s.given.length()) reqs[n++] = t.irecv(data + s.given.begin * elem, s.given.length() * elem, s.peer, doubling_tag);
    if (s.kept.length()) reqs[n++] = t.isend(data + s.kept.begin * elem, s.kept.length() * elem, s.peer, doubling_tag);
    wait_all(t, reqs.data(), n, ctx.policy);
  }

  if (fold.folded(rank)) {  // the result goes back to the rank that sat out
    Request out = t.isend(data, bytes, rank - 1, ctx.base_tag | kUnfoldTag);
    wait_all(t, &out, 1, ctx.policy);
  }
}

}  // namespace hpctrain::coll::detail
