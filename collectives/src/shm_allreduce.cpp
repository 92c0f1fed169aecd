// Single-copy all-reduce through node shared memory (an MPI-3 shared-memory window, or one heap
// block for loopback threads), for the m ranks of one node.
//
// Memory. Each local rank q owns one segment of the shared memory: a control page whose first
// cache line holds arrived[q], a 64-bit atomic barrier counter only q writes, then two staging
// buffers of s = Tuning::shm_segment_bytes each. Consecutive steps (a small call or one segment
// of a large call) alternate between the two buffers (NodeGroup::parity, kept across calls).
//
// Node barrier. Barrier number e: a rank stores arrived[me] = e (release), then waits until
// arrived[q] >= e (acquire) for every q. Waits spin, then yield the core (SpinWait, the policy of
// the transport waits: oversubscribed ranks must let their peers run), and fail with a
// TimeoutError naming the ranks that have not arrived once HPCTRAIN_COLL_TIMEOUT_S has passed.
//
// Schedule, small messages (n <= Tuning::shm_small_max_bytes, one step, one barrier): every rank
// copies its input into its staging buffer, barrier, and every rank reduces all m buffers, in
// local-rank order, into its output (every rank computes the same bits; no second phase).
//
// Schedule, large messages (per segment of s bytes, two barriers):
//  1. copy-in: rank l copies the segment of its input into its staging buffer, except slice l
//     (the segment is cut into m balanced slices; slice l is reduced by rank l);
//  2. barrier A;
//  3. rank l reduces slice l: own input ⊕ every peer's staging buffer (read directly from the
//     peer's memory), written into slice l of its own staging buffer; the hierarchical
//     algorithm runs its inter-node all-reduce on that slice here;
//  4. barrier B;
//  5. copy-out: every rank copies every slice q from rank q's staging buffer into its output.
// The user buffers are read and written once each; the staged segment (m·s bytes) stays in
// cache between copy-in, reduction and copy-out, so at 64 MiB the memory traffic is close to
// one copy. Slices are balanced by elements; with nodes of unequal size (hierarchical) the
// buffer is cut into NodeGroup::slices slices and the local ranks beyond them own none.
//
// Cost per rank, n bytes, m ranks, segment s, barrier α_b (m cache-line transfers), copy β per
// byte, reduction γ per byte:
//   small:  α_b + n·β + (m-1)·n·γ
//   large:  2⌈n/s⌉·α_b + (m-1)/m·n·β (copy-in) + (m-1)/m·n·γ (reduce) + n·β (copy-out)
// against the ring's 2(p-1)·α (messages through the MPI library, each itself a copy or two)
// + 2(p-1)/p·n·β + (p-1)/p·n·γ.
//
// Memory ordering. (a) Data before use: a rank's plain stores into its staging buffer are
// sequenced before its release store of arrived[me] = e; a reader's acquire load that sees
// arrived[q] >= e synchronizes with it (the counter only grows, and q's later stores are
// release stores too, so seeing any later value also synchronizes), so q's stores
// happen-before the reader's loads of q's buffer. The same holds for the reduced slices before
// barrier B. (b) Slot free before reuse: a buffer used in step k is written next in step k+2.
// Every read of step k's buffers by a rank r is sequenced before r's release store of its
// first barrier of step k+1; the writer of step k+2 has passed that barrier (acquire), so r's
// reads happen-before the overwrite. Within a segment, barrier A separates copy-in from the
// peers' reads, and barrier B separates the slice writes from the copy-out; reads of other
// ranks' data never touch the slice a rank is writing. Removing either buffer alternation or a
// release/acquire pair makes the stress tests (tests/collectives) fail with wrong sums.
// std::atomic<std::uint64_t> is lock-free (checked below), so it works across processes that
// map the same memory; the counters are constructed by their owner and published to the other
// ranks by a point-to-point barrier (shm_prepare) before first use.

#include <algorithm>
#include <atomic>
#include <cstring>
#include <new>
#include <sstream>
#include <string>

#include "algorithms.hpp"
#include "hpctrain/collectives/error.hpp"
#include "progress_wait.hpp"
#include "reduce.hpp"

namespace hpctrain::coll::detail {

namespace {

using Counter = std::atomic<std::uint64_t>;
static_assert(Counter::is_always_lock_free, "shared-memory barriers need lock-free 64-bit atomics");

/// Control page before the staging buffers: keeps the buffers page-aligned and the counter on
/// its own cache line.
constexpr std::size_t kControlBytes = 4096;

Counter& arrived(const NodeGroup& g, int q) {
  return *std::launder(reinterpret_cast<Counter*>(g.memory->segment(q)));
}

std::byte* staging(const NodeGroup& g, int q) {
  return g.memory->segment(q) + kControlBytes + g.parity * g.segment_bytes;
}

[[noreturn]] void barrier_timeout(const NodeGroup& g, const WaitPolicy& policy, std::uint64_t e) {
  std::ostringstream os;
  os << policy.description() << " did not complete within " << policy.timeout.count()
     << " s (HPCTRAIN_COLL_TIMEOUT_S); still waiting at the node's shared-memory barrier for:";
  bool any = false;
  for (int q = 0; q < g.local_size(); ++q) {
    if (q == g.local_rank() || arrived(g, q).load(std::memory_order_acquire) >= e) continue;
    os << (any ? "," : "") << " rank " << g.parent_rank[static_cast<std::size_t>(q)];
    any = true;
  }
  throw TimeoutError(os.str(), __FILE__, __LINE__);
}

void node_barrier(NodeGroup& g, const WaitPolicy& policy) {
  const int m = g.local_size(), me = g.local_rank();
  const std::uint64_t e = ++g.epoch;
  arrived(g, me).store(e, std::memory_order_release);
  if (m == 1) return;
  SpinWait spin(policy);
  for (int q = 0; q < m; ++q) {
    if (q == me) continue;
    const Counter& c = arrived(g, q);
    while (c.load(std::memory_order_acquire) < e) {
      if (spin.expired()) barrier_timeout(g, policy, e);
    }
  }
}

/// out = own ⊕ staging(q ≠ me) over [first, first+len) elements, peers in local-rank order.
void reduce_slice(const NodeGroup& g, std::byte* out, const std::byte* own, std::size_t first,
                  std::size_t len, DataType type, ReduceOp op) {
  const std::size_t elem = size_of(type), at = first * elem;
  const int m = g.local_size(), me = g.local_rank();
  bool started = false;
  for (int q = 0; q < m; ++q) {
    if (q == me) continue;
    const std::byte* peer = staging(g, q) + at;
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

std::size_t shm_bytes_per_rank(std::size_t segment_bytes) { return kControlBytes + 2 * segment_bytes; }

void shm_prepare(CollContext& local_ctx, NodeGroup& node) {
  HPCTRAIN_REQUIRE(node.memory && node.memory->bytes_per_rank() >= shm_bytes_per_rank(node.segment_bytes),
                   "shm: shared memory smaller than the staging buffers");
  new (node.memory->segment(node.local_rank())) Counter(0);
  node.epoch = 0;
  node.parity = 0;
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
    const std::size_t n = std::min(chunk, count - c0);
    off = balanced_offsets(n, slices);
    const std::byte* src = in + c0 * elem;
    std::byte* mine = staging(g, me);
    // 1. copy-in (not the own slice: nobody else reads it, the reduction writes it)
    if (owner) {
      const std::size_t b = off[static_cast<std::size_t>(me)], e = off[static_cast<std::size_t>(me) + 1];
      if (b) std::memcpy(mine, src, b * elem);
      if (n > e) std::memcpy(mine + e * elem, src + e * elem, (n - e) * elem);
    } else {
      std::memcpy(mine, src, n * elem);
    }
    node_barrier(g, ctx.policy);  // A: every input of this segment is staged
    // 3. reduce the own slice from every peer's staging buffer
    if (owner) {
      const std::size_t b = off[static_cast<std::size_t>(me)];
      const std::size_t len = off[static_cast<std::size_t>(me) + 1] - b;
      std::byte* slice = mine + b * elem;
      if (len) reduce_slice(g, slice, src + b * elem, b, len, type, op);
      if (between) between(slice, len);
    }
    node_barrier(g, ctx.policy);  // B: every slice is reduced
    // 5. copy-out
    for (int q = 0; q < slices; ++q) {
      const std::size_t b = off[static_cast<std::size_t>(q)];
      const std::size_t len = off[static_cast<std::size_t>(q) + 1] - b;
      if (len) std::memcpy(out + (c0 + b) * elem, staging(g, q) + b * elem, len * elem);
    }
    g.parity ^= 1u;
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
  // One step: publish, one barrier, everyone reduces everything.
  std::memcpy(staging(g, g.local_rank()), send, bytes);
  node_barrier(g, ctx.policy);
  const int m = g.local_size();
  reduce_to(recv, staging(g, 0), staging(g, 1), count, type, op);
  for (int q = 2; q < m; ++q) reduce_into(recv, staging(g, q), count, type, op);
  g.parity ^= 1u;
}

}  // namespace hpctrain::coll::detail
