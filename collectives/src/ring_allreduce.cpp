// Ring all-reduce: pipelined reduce-scatter followed by all-gather (Patarasuk & Yuan 2009).
//
// Schedule. The buffer of n elements is cut into p blocks, block b owned by rank b. Each rank
// sends to its right neighbour (r+1) and receives from its left (r-1).
//  * Reduce-scatter, steps s = 0..p-2: rank r sends block (r-s-1) and receives block (r-s-2),
//    which it adds into its own copy. After p-1 steps block r holds the full reduction.
//  * All-gather, steps s = 0..p-2: rank r sends block (r-s) and receives block (r-s-1) into
//    place. A received segment is forwarded at the next step as soon as it arrives, so the
//    all-gather streams around the ring instead of moving in lock-step.
// Each block travels in segments (Tuning::ring_segment_bytes) and up to Tuning::ring_window
// segment receives are outstanding, so the reduction of one segment overlaps the transfer of
// the next and the scratch memory stays window × segment bytes.
//
// Cost, per rank: 2(p-1) α·(segments per block) + 2(p-1)/p · n·β + (p-1)/p · n·γ, i.e. the
// bandwidth-optimal volume; latency grows linearly in p, so small messages go to the tree.
// Out of place, the first step sends from the input and every reduction writes
// recv = input ⊕ incoming, so the input is never copied into the output first (that copy was a
// full extra pass over n bytes, about a third of the user-space copying at p = 2).

#include <algorithm>
#include <cstring>
#include <string>

#include "algorithms.hpp"
#include "hpctrain/base/error.hpp"
#include "progress_wait.hpp"
#include "reduce.hpp"

namespace hpctrain::coll::detail {

namespace {

constexpr Tag kReduceScatterTag = 1;
constexpr Tag kAllgatherTag = 2;

/// Segments of one block: [begin + k*seg, min(begin + (k+1)*seg, end)) elements.
struct Segments {
  std::size_t begin, end, seg;
  std::size_t count() const { return end > begin ? (end - begin + seg - 1) / seg : 0; }
  std::size_t offset(std::size_t k) const { return begin + k * seg; }
  std::size_t length(std::size_t k) const { return std::min(seg, end - offset(k)); }
};

int wrap(int v, int p) { return ((v % p) + p) % p; }

std::size_t segment_elements(const Tuning& t, std::size_t elem) {
  return std::max<std::size_t>(1, t.ring_segment_bytes / elem);
}

}  // namespace

std::vector<std::size_t> balanced_offsets(std::size_t count, int parts) {
  std::vector<std::size_t> off(static_cast<std::size_t>(parts) + 1, 0);
  const std::size_t base = count / static_cast<std::size_t>(parts);
  const std::size_t extra = count % static_cast<std::size_t>(parts);
  for (std::size_t b = 0; b < static_cast<std::size_t>(parts); ++b) {
    off[b + 1] = off[b] + base + (b < extra ? 1 : 0);
  }
  return off;
}

void ring_reduce_scatter(CollContext& ctx, const void* send, void* buf,
                         const std::vector<std::size_t>& offsets, DataType type, ReduceOp op) {
  Transport& t = ctx.transport;
  const int p = t.size(), r = t.rank();
  if (p == 1) return;
  const int right = wrap(r + 1, p), left = wrap(r - 1, p);
  const std::size_t elem = size_of(type);
  const std::size_t seg = segment_elements(ctx.tuning, elem);
  const std::size_t window = std::max<std::size_t>(1, ctx.tuning.ring_window);
  auto* data = static_cast<std::byte*>(buf);
  const auto* input = static_cast<const std::byte*>(send);
  std::byte* scratch = ctx.scratch_bytes(window * seg * elem);
  const Tag tag = ctx.base_tag | kReduceScatterTag;

  std::vector<Request> sends;
  std::vector<Request> recvs(window);
  std::vector<std::size_t> recv_segment(window);
  for (int s = 0; s < p - 1; ++s) {
    const auto send_block = static_cast<std::size_t>(wrap(r - s - 1, p));
    const auto recv_block = static_cast<std::size_t>(wrap(r - s - 2, p));
    const Segments out{offsets[send_block], offsets[send_block + 1], seg};
    const Segments in{offsets[recv_block], offsets[recv_block + 1], seg};
    // The block sent now is the one reduced in the previous step (complete in `buf`), or at
    // step 0 this rank's own input.
    const std::byte* from = s == 0 ? input : data;
    for (std::size_t k = 0; k < out.count(); ++k) {
      sends.push_back(t.isend(from + out.offset(k) * elem, out.length(k) * elem, right, tag));
    }
    std::size_t posted = 0, reduced = 0;
    auto post = [&](std::size_t slot) {
      recv_segment[slot] = posted;
      recvs[slot] = t.irecv(scratch + slot * seg * elem, in.length(posted) * elem, left, tag);
      ++posted;
    };
    for (std::size_t slot = 0; slot < window && posted < in.count(); ++slot) post(slot);
    while (reduced < in.count()) {
      const std::size_t slot = wait_any(t, recvs.data(), std::min(window, in.count()), ctx.policy);
      const std::size_t k = recv_segment[slot];
      // Each block is received once, so buf = input ⊕ incoming: the input is read in place,
      // never copied into `buf` first.
      const std::size_t at = in.offset(k) * elem;
      reduce_to(data + at, input + at, scratch + slot * seg * elem, in.length(k), type, op);
      ++reduced;
      if (posted < in.count()) post(slot);
    }
  }
  wait_all(t, sends, ctx.policy);
}

void ring_allgather(CollContext& ctx, void* buf, const std::vector<std::size_t>& offsets,
                    DataType type) {
  Transport& t = ctx.transport;
  const int p = t.size(), r = t.rank();
  if (p == 1) return;
  const int right = wrap(r + 1, p), left = wrap(r - 1, p);
  const std::size_t elem = size_of(type);
  const std::size_t seg = segment_elements(ctx.tuning, elem);
  auto* data = static_cast<std::byte*>(buf);
  const Tag tag = ctx.base_tag | kAllgatherTag;

  auto block_segments = [&](int block) {
    const auto b = static_cast<std::size_t>(block);
    return Segments{offsets[b], offsets[b + 1], seg};
  };
  std::vector<Request> sends;
  // Step 0 sends this rank's own block.
  const Segments own = block_segments(r);
  for (std::size_t k = 0; k < own.count(); ++k) {
    sends.push_back(t.isend(data + own.offset(k) * elem, own.length(k) * elem, right, tag));
  }
  // Every receive goes straight to its final place, so all can be posted up front (in the
  // order the left neighbour sends them).
  std::vector<Request> recvs;
  std::vector<std::pair<int, std::size_t>> what;  // (step, segment) of each receive
  for (int s = 0; s < p - 1; ++s) {
    const Segments in = block_segments(wrap(r - s - 1, p));
    for (std::size_t k = 0; k < in.count(); ++k) {
      recvs.push_back(t.irecv(data + in.offset(k) * elem, in.length(k) * elem, left, tag));
      what.emplace_back(s, k);
    }
  }
  // Forward received segments in receive-posting order (the right neighbour matches them in
  // that order), each as soon as it and all before it have arrived.
  std::size_t forwarded = 0;
  SpinWait spin(ctx.policy);
  while (forwarded < recvs.size()) {
    if (t.test(recvs[forwarded])) {
      const auto [s, k] = what[forwarded];
      if (s + 1 < p - 1) {
        const Segments in = block_segments(wrap(r - s - 1, p));
        sends.push_back(t.isend(data + in.offset(k) * elem, in.length(k) * elem, right, tag));
      }
      ++forwarded;
      spin.reset_spins();
      continue;
    }
    block_until_any(t, &recvs[forwarded], 1);
    if (spin.expired()) spin.fail(t, recvs.data(), recvs.size());
  }
  wait_all(t, sends, ctx.policy);
}

void ring_allreduce(CollContext& ctx, const void* send, void* recv, std::size_t count, DataType type,
                    ReduceOp op) {
  const int p = ctx.transport.size();
  if (count == 0) return;
  if (p == 1) {
    if (send != recv) std::memcpy(recv, send, count * size_of(type));
    return;
  }
  const auto offsets = balanced_offsets(count, p);
  ring_reduce_scatter(ctx, send, recv, offsets, type, op);
  ring_allgather(ctx, recv, offsets, type);
}

}  // namespace hpctrain::coll::detail
