// Single-copy all-reduce through node shared memory (an MPI-3 shared-memory window, or one heap
// block for loopback threads), for the m ranks of one node. The staging buffers, counters and
// waits defined here (shm_flags.hpp) also carry the shm reduce-scatter and all-gather
// (shm_scatter_gather.cpp); every shm collective numbers its steps on the same counters.
//
// Memory. Each local rank q owns one segment of the shared memory: a control page whose first
// cache line holds progress[q], a 64-bit atomic counter only q writes, then two staging buffers
// of s = Tuning::shm_segment_bytes each. The window is 4 KiB + 2s per rank, whatever n is.
// Steps (a small call, or one segment of a large call) are numbered k = 0, 1, ... across calls
// (NodeGroup::next_segment) and use staging buffer k mod 2.
//
// Flags. A rank publishes its progress through step k as progress[me] = 3k+1 (its input is
// staged), 3k+2 (its slice is reduced), 3k+3 (it has finished reading step k's buffers), each a
// release store; a rank waits for a phase by acquire-loading progress[q] until it is >= the
// value, for every q. Waits spin, then yield the core (SpinWait, the policy of the transport
// waits: oversubscribed ranks must let their peers run), and fail with a TimeoutError naming
// the ranks still behind once HPCTRAIN_COLL_TIMEOUT_S has passed.
//
// Schedule, small messages (n <= Tuning::shm_small_max_bytes, one step, one wait): every rank
// copies its input into its staging buffer and publishes 3k+1; once all have, every rank
// reduces all m buffers, in local-rank order, into its output (every rank computes the same
// bits; no second phase), then publishes 3k+3.
//
// Schedule, large messages (per segment of s bytes, two waits):
//  1. copy-in: rank l copies the segment of its input into its staging buffer, except slice l
//     (the segment is cut into balanced slices; slice l is reduced by rank l); publish 3k+1;
//  2. wait for 3k+1 from all (A);
//  3. rank l reduces slice l: own input ⊕ every peer's staging buffer (read directly from the
//     peer's memory), written into slice l of its own staging buffer; the hierarchical
//     algorithm runs its inter-node all-reduce on that slice here; publish 3k+2;
//  4. wait for 3k+2 from all (B);
//  5. copy-out: every rank copies every slice q from rank q's staging buffer into its output;
//     publish 3k+3.
// The user buffers are read and written once each; the staged segment (m·s bytes) stays in
// cache between copy-in, reduction and copy-out. Slices are balanced by elements; with nodes
// of unequal size (hierarchical) the buffer is cut into NodeGroup::slices slices and the local
// ranks beyond them own none.
//
// Cost per rank, n bytes, m ranks, segment s, flag wait α_f (m cache-line transfers), copy β
// per byte, reduction γ per byte:
//   small:  α_f + n·β + (m-1)·n·γ
//   large:  2⌈n/s⌉·α_f + (m-1)/m·n·β (copy-in) + (m-1)/m·n·γ (reduce) + n·β (copy-out)
// against the ring's 2(p-1)·α (messages through the MPI library) + 2(p-1)/p·n·β + (p-1)/p·n·γ.
//
// Memory ordering. (a) Data before use: a rank's plain stores into its staging buffer (or its
// reduced slice) are sequenced before its release store of 3k+1 (3k+2); a reader's acquire load
// that sees progress[q] >= that value synchronizes with it (the counter only grows, and every
// later store of q is a release store, so a later value also synchronizes), so q's stores
// happen-before the reader's loads. (b) Slot free before reuse: step k writes the buffer of
// step k-2. Every read of step k-2's buffers by rank r is sequenced before r's release store of
// 3(k-2)+3; the writer acquire-loads that value (wait_slot_free; also implied by the waits of
// step k-1, since r publishes 3(k-1)+1 only after 3(k-2)+3), so r's reads happen-before the
// overwrite. Within a step, wait A separates copy-in from the peers' reads and wait B the slice
// writes from the copy-out; reads of other ranks' data never touch the slice a rank writes.
// The stress tests (tests/collectives, ShmStress*) fail with wrong sums when the buffer
// alternation and the slot-free wait are removed, or when wait A is removed.
// std::atomic<std::uint64_t> is lock-free (checked below), so it works across processes that
// map the same memory (on x86-64 a release store is a plain store and an acquire load a plain
// load: the ordering is enforced on the compiler, and TSO keeps it in hardware); the counters
// are constructed by their owner and published to the other ranks by a point-to-point barrier
// (shm_prepare) before first use.

#include <algorithm>
#include <atomic>
#include <cstring>
#include <new>
#include <sstream>
#include <string>

#include "algorithms.hpp"
#include "hpctrain/base/error.hpp"
#include "progress_wait.hpp"
#include "reduce.hpp"
#include "shm_flags.hpp"

namespace hpctrain::coll::detail {

namespace {

using Counter = std::atomic<std::uint64_t>;
static_assert(Counter::is_always_lock_free, "shared-memory flags need lock-free 64-bit atomics");

/// Control page before the staging buffers: keeps the buffers page-aligned and the counter on
/// its own cache line.
constexpr std::size_t kControlBytes = 4096;

Counter& progress(const NodeGroup& g, int q) {
  return *std::launder(reinterpret_cast<Counter*>(g.memory->segment(q)));
}

[[noreturn]] void wait_timeout(const NodeGroup& g, const WaitPolicy& policy, std::uint64_t value) {
  std::ostringstream os;
  os << policy.description() << " did not complete within " << policy.timeout.count()
     << " s (HPCTRAIN_COLL_TIMEOUT_S); still waiting in node shared memory for:";
  bool any = false;
  for (int q = 0; q < g.local_size(); ++q) {
    if (q == g.local_rank() || progress(g, q).load(std::memory_order_acquire) >= value) continue;
    os << (any ? "," : "") << " rank " << g.parent_rank[static_cast<std::size_t>(q)];
    any = true;
  }
  // Secondary: these ranks share our memory and are alive, so they are stuck in a wait of their
  // own (hierarchical's inter-node step); abort_job lets their report, naming the cause, go first.
  throw SecondaryTimeoutError(os.str(), __FILE__, __LINE__);
}

}  // namespace

std::byte* staging(const NodeGroup& g, int q, std::uint64_t segment) {
  return g.memory->segment(q) + kControlBytes + static_cast<std::size_t>(segment % kSlots) * g.segment_bytes;
}

/// Publishes this rank's progress (release: everything it wrote or read before is ordered first).
void publish(const NodeGroup& g, std::uint64_t value) {
  progress(g, g.local_rank()).store(value, std::memory_order_release);
}

/// Waits until every other local rank has published at least `value` (acquire).
void wait_for_all(const NodeGroup& g, const WaitPolicy& policy, std::uint64_t value) {
  const int m = g.local_size(), me = g.local_rank();
  if (m == 1) return;
  SpinWait spin(policy);
  for (int q = 0; q < m; ++q) {
    if (q == me) continue;
    const Counter& c = progress(g, q);
    while (c.load(std::memory_order_acquire) < value) {
      if (spin.expired()) wait_timeout(g, policy, value);
    }
  }
}

/// Before staging segment k: every rank has copied out segment k - kSlots (same buffer). With
/// two slots the waits of segment k-1 already imply it, so this returns at its first check; it
/// keeps the "slot free" condition explicit and correct for any kSlots.
void wait_slot_free(const NodeGroup& g, const WaitPolicy& policy, std::uint64_t k) {
  if (k >= kSlots) wait_for_all(g, policy, kPhases * (k - kSlots) + 3);
}

void reduce_staged(const NodeGroup& g, std::uint64_t k, void* out, std::size_t at, std::size_t count,
                   DataType type, ReduceOp op) {
  const int m = g.local_size();
  if (m == 1) {
    std::memcpy(out, staging(g, 0, k) + at, count * size_of(type));
    return;
  }
  reduce_to(out, staging(g, 0, k) + at, staging(g, 1, k) + at, count, type, op);
  for (int q = 2; q < m; ++q) reduce_into(out, staging(g, q, k) + at, count, type, op);
}

namespace {

/// out = own ⊕ staging(q ≠ me) over [first, first+len) elements, peers in local-rank order.
void reduce_slice(const NodeGroup& g, std::uint64_t k, std::byte* out, const std::byte* own,
                  std::size_t first, std::size_t len, DataType type, ReduceOp op) {
  const std::size_t elem = size_of(type), at = first * elem;
  const int m = g.local_size(), me = g.local_rank();
  bool started = false;
  for (int q = 0; q < m; ++q) {
    if (q == me) continue;
    const std::byte* peer = staging(g, q, k) + at;
    if (!started) {
      reduce_to(out, own, peer, len, type, op);
      started = true;
    } else {
      reduce_into(out, peer, len, type, op);
    }
  }
  if (!started) std::memcpy(out, own, len * elem);
}

}  // namespace

std::size_t shm_bytes_per_rank(std::size_t segment_bytes) {
  return kControlBytes + static_cast<std::size_t>(kSlots) * segment_bytes;
}

void shm_prepare(CollContext& local_ctx, NodeGroup& node) {
  HPCTRAIN_REQUIRE(node.memory && node.memory->bytes_per_rank() >= shm_bytes_per_rank(node.segment_bytes),
                   "shm: shared memory smaller than the staging buffers");
  new (node.memory->segment(node.local_rank())) Counter(0);
  node.next_segment = 0;
  dissemination_barrier(local_ctx);  // every counter exists before anyone reads it
}

void shm_segmented_allreduce(CollContext& ctx, NodeGroup& g, const void* send, void* recv,
                             std::size_t count, DataType type, ReduceOp op, const SliceStep& between) {
  const std::size_t elem = size_of(type);
  const int me = g.local_rank(), slices = g.slices;
  const bool owner = me < slices;
  const std::size_t chunk = std::max<std::size_t>(1, g.segment_bytes / elem);
  const auto* in = static_cast<const std::byte*>(send);
  auto* out = static_cast<std::byte*>(recv);
  std::vector<std::size_t> off;
  for (std::size_t c0 = 0; c0 < count; c0 += chunk) {
    const std::uint64_t k = g.next_segment++;
    const std::size_t n = std::min(chunk, count - c0);
    off = balanced_offsets(n, slices);
    const std::byte* src = in + c0 * elem;
    std::byte* mine = staging(g, me, k);
    wait_slot_free(g, ctx.policy, k);
    // 1. copy-in (not the own slice: nobody else reads it, the reduction writes it)
    if (owner) {
      const std::size_t b = off[static_cast<std::size_t>(me)], e = off[static_cast<std::size_t>(me) + 1];
      if (b) std::memcpy(mine, src, b * elem);
      if (n > e) std::memcpy(mine + e * elem, src + e * elem, (n - e) * elem);
    } else {
      std::memcpy(mine, src, n * elem);
    }
    publish(g, kPhases * k + 1);
    wait_for_all(g, ctx.policy, kPhases * k + 1);  // A: every input of this segment is staged
    // 3. reduce the own slice from every peer's staging buffer
    if (owner) {
      const std::size_t b = off[static_cast<std::size_t>(me)];
      const std::size_t len = off[static_cast<std::size_t>(me) + 1] - b;
      std::byte* slice = mine + b * elem;
      if (len) reduce_slice(g, k, slice, src + b * elem, b, len, type, op);
      if (between) between(slice, len);
    }
    publish(g, kPhases * k + 2);
    wait_for_all(g, ctx.policy, kPhases * k + 2);  // B: every slice is reduced
    // 5. copy-out
    for (int q = 0; q < slices; ++q) {
      const std::size_t b = off[static_cast<std::size_t>(q)];
      const std::size_t len = off[static_cast<std::size_t>(q) + 1] - b;
      if (len) std::memcpy(out + (c0 + b) * elem, staging(g, q, k) + b * elem, len * elem);
    }
    publish(g, kPhases * k + 3);  // this rank is done with every buffer of segment k
  }
}

void shm_allreduce(CollContext& ctx, NodeGroup& g, const void* send, void* recv, std::size_t count,
                   DataType type, ReduceOp op) {
  const std::size_t bytes = count * size_of(type);
  if (count == 0) return;
  if (g.local_size() == 1) {
    if (send != recv) std::memcpy(recv, send, bytes);
    return;
  }
  if (bytes > ctx.tuning.shm_small_max_bytes || bytes > g.segment_bytes) {
    shm_segmented_allreduce(ctx, g, send, recv, count, type, op, SliceStep());
    return;
  }
  // One step: publish the input, wait for everyone's, reduce them all here.
  const std::uint64_t k = g.next_segment++;
  wait_slot_free(g, ctx.policy, k);
  std::memcpy(staging(g, g.local_rank(), k), send, bytes);
  publish(g, kPhases * k + 1);
  wait_for_all(g, ctx.policy, kPhases * k + 1);
  reduce_staged(g, k, recv, 0, count, type, op);
  publish(g, kPhases * k + 3);  // no rank waits for 3k+2 of a one-step segment
}

}  // namespace hpctrain::coll::detail
