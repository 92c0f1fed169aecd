// Tree all-reduce.
//
// Small messages (≤ Tuning::tree_binomial_max_bytes): binomial reduce to rank 0, then binomial
// broadcast, the root's last receive and first send fused into one exchange (see
// binomial_allreduce). (2⌈lg p⌉-1)(α + n·β) + ⌈lg p⌉ n·γ: latency-optimal up to a factor of
// two, the right shape when α dominates.
//
// Large messages: pipelined double binary tree (Sanders, Speck & Träff 2009). The buffer is
// split in two halves; half A is reduced up and broadcast down tree A, half B along tree B.
// Tree A is the in-order balanced binary tree over ranks 0..p-1 (interior nodes at odd
// positions when p = 2^k-1); tree B is the same tree over positions shifted by one rank, so a
// rank that is interior in one tree is (for most p) a leaf in the other, and every rank sends
// and receives about n bytes in total instead of a single tree's 2n at interior nodes. Each
// half moves in segments (Tuning::tree_segment_bytes): a rank reduces segment k of its
// children and passes it up while segment k+1 is still arriving; the root turns segments
// around as soon as they are reduced. Cost ≈ 2 lg p · α·(segments) + 2n·β... with the
// pipeline hiding the depth: time ≈ (2 lg p + n/seg) · (α + seg·β).
//
// Input and output: both schedules read `send` until their first reduction of a vector (or
// segment) writes the partial result into `recv`; a leaf passes its input up as it lies and
// receives the result into `recv`. So the input is never copied into the output first.

#include <algorithm>
#include <array>
#include <cstring>
#include <deque>
#include <string>

#include "algorithms.hpp"
#include "modelled_algorithms.hpp"
#include "hpctrain/base/error.hpp"
#include "progress_wait.hpp"
#include "reduce.hpp"

namespace hpctrain::coll::detail {

namespace {

constexpr Tag kBinomialReduceTag = 8;
constexpr Tag kBinomialBcastTag = 9;
constexpr Tag kTreeUpTag[2] = {16, 17};
constexpr Tag kTreeDownTag[2] = {18, 19};

// ---- binomial ---------------------------------------------------------------------------

/// Binomial all-reduce: binomial reduce to rank 0, binomial broadcast from rank 0, with the
/// reduce's last step and the broadcast's first step fused. In the plain form rank `top` (the
/// highest power of two below p) sends its half's partial result to rank 0, which reduces and
/// sends the result straight back to `top`. Here 0 and `top` exchange their partials and both
/// reduce, then each roots the broadcast of its half: 2⌈lg p⌉-1 message steps instead of
/// 2⌈lg p⌉, which at p = 2 is one exchange instead of a round trip. Both compute
/// op(lower half, upper half), so they hold the same bits even for min/max with NaN or ±0.
/// `in` is read until the first reduction writes the partial result into `data`.
void binomial_allreduce(CollContext& ctx, const std::byte* in, std::byte* data, std::size_t count,
                        DataType type, ReduceOp op) {
  Transport& t = ctx.transport;
  const int p = t.size(), r = t.rank();
  const std::size_t bytes = count * size_of(type);
  const Tag reduce_tag = ctx.base_tag | kBinomialReduceTag;
  const Tag bcast_tag = ctx.base_tag | kBinomialBcastTag;
  int top = 1;
  while (top * 2 < p) top *= 2;
  std::byte* incoming = ctx.scratch_bytes(bytes);
  const std::byte* partial = in;  // this rank's partial result: `in`, then `data`

  // Reduce within [0, top) towards 0 and within [top, p) towards top.
  bool sent_up = false;
  for (int mask = 1; mask < top; mask <<= 1) {
    if (r & mask) {  // pass the partial result to the parent; the result comes back down
      Request req = t.isend(partial, bytes, r - mask, reduce_tag);
      wait_all(t, &req, 1, ctx.policy);
      sent_up = true;
      break;
    }
    if (r + mask < p) {
      Request req = t.irecv(incoming, bytes, r + mask, reduce_tag);
      wait_all(t, &req, 1, ctx.policy);
      reduce_to(data, partial, incoming, count, type, op);  // reduce_into when partial == data
      partial = data;
    }
  }
  int low = top;  // children of this rank in the broadcast: r + m for m < low
  if (!sent_up) {  // r is 0 or top: exchange the two halves' partials
    const int partner = r == 0 ? top : 0;
    std::array<Request, 2> reqs = {t.irecv(incoming, bytes, partner, reduce_tag),
                                   t.isend(partial, bytes, partner, reduce_tag)};
    wait_all(t, reqs.data(), reqs.size(), ctx.policy);
    if (r == 0) {
      reduce_to(data, partial, incoming, count, type, op);
    } else {
      reduce_into(incoming, partial, count, type, op);  // lower ⊕ upper, as on rank 0
      std::memcpy(data, incoming, bytes);
    }
  } else {
    low = r & -r;
    Request req = t.irecv(data, bytes, r - low, bcast_tag);
    wait_all(t, &req, 1, ctx.policy);
  }
  // One child at a time, the largest subtree first (as MPICH's binomial broadcast): sends
  // posted together share this rank's link, so the first child (whose subtree is deepest) got
  // the vector only after all of them. Under SimGrid SMPI at 64 KiB (a rendezvous size) this
  // took the tree all-reduce from 66.5 to 50.7 µs at 16 ranks and from 135.5 to 82.9 µs at 64.
  // Below the eager limit a send completes at once and the messages still share the link
  // (CostModel::eager_bytes prices that).
  for (int m = low >> 1; m > 0; m >>= 1) {
    if (r + m >= p) continue;
    Request send = t.isend(data, bytes, r + m, bcast_tag);
    wait_all(t, &send, 1, ctx.policy);
  }
}

void binomial_broadcast_tagged(CollContext& ctx, void* buf, std::size_t bytes, int root, Tag tag) {
  Transport& t = ctx.transport;
  const int p = t.size();
  const int vr = (t.rank() - root + p) % p;  // rank relative to the root
  int mask = 1;
  while (mask < p) {
    if (vr & mask) {
      Request req = t.irecv(buf, bytes, (vr - mask + root) % p, tag);
      wait_all(t, &req, 1, ctx.policy);
      break;
    }
    mask <<= 1;
  }
  for (mask >>= 1; mask > 0; mask >>= 1) {  // one child at a time, largest subtree first (above)
    if (vr + mask >= p) continue;
    Request send = t.isend(buf, bytes, (vr + mask + root) % p, tag);
    wait_all(t, &send, 1, ctx.policy);
  }
}

// ---- double binary tree -----------------------------------------------------------------

struct TreeNode {
  int parent = -1;
  std::array<int, 2> children{-1, -1};
  int child_count() const { return (children[0] >= 0) + (children[1] >= 0); }
};

/// Node of `position` in the in-order balanced binary tree over positions [lo, hi).
void locate(int lo, int hi, int parent, int position, TreeNode& node) {
  const int mid = lo + (hi - lo) / 2;
  if (position == mid) {
    node.parent = parent;
    node.children = {lo < mid ? lo + (mid - lo) / 2 : -1, mid + 1 < hi ? mid + 1 + (hi - mid - 1) / 2 : -1};
    return;
  }
  if (position < mid) locate(lo, mid, mid, position, node);
  else locate(mid + 1, hi, mid, position, node);
}

/// Tree `which` (0 = A, 1 = B) of rank r among p: B is A over positions shifted by one.
TreeNode tree_of(int which, int r, int p) {
  const int shift = which;  // position = (rank + shift) mod p
  TreeNode pos;
  locate(0, p, -1, (r + shift) % p, pos);
  auto to_rank = [&](int position) { return position < 0 ? -1 : (position - shift + p) % p; };
  TreeNode node;
  node.parent = to_rank(pos.parent);
  node.children = {to_rank(pos.children[0]), to_rank(pos.children[1])};
  return node;
}

}  // namespace

int double_tree_busiest_links(int p) {
  if (p <= 1) return 0;
  int busiest = 0;
  for (int r = 0; r < p; ++r) {
    int links = 0;
    for (int which = 0; which < 2; ++which) {
      const TreeNode node = tree_of(which, r, p);
      links += (node.parent >= 0) + node.child_count();
    }
    busiest = std::max(busiest, links);
  }
  return busiest;
}

namespace {

/// The pipelined up/down schedule of one half along one tree, driven by poll() calls.
class TreePipeline {
 public:
  TreePipeline(CollContext& ctx, int which, const std::byte* in, std::byte* data, std::size_t begin,
               std::size_t end, DataType type, ReduceOp op, std::byte* scratch, std::size_t window)
      : t_(ctx.transport),
        node_(tree_of(which, ctx.transport.rank(), ctx.transport.size())),
        up_tag_(ctx.base_tag | kTreeUpTag[which]),
        down_tag_(ctx.base_tag | kTreeDownTag[which]),
        elem_(size_of(type)),
        seg_(std::max<std::size_t>(1, ctx.tuning.tree_segment_bytes / size_of(type))),
        in_(in),
        data_(data),
        begin_(begin),
        segments_(end > begin ? (end - begin + seg_ - 1) / seg_ : 0),
        end_(end),
        type_(type),
        op_(op),
        scratch_(scratch),
        window_(window),
        child_recv_(window * 2) {}

  /// Scratch bytes one pipeline needs: a window of segments per child.
  static std::size_t scratch_bytes(const Tuning& t, DataType type, std::size_t window) {
    const std::size_t seg = std::max<std::size_t>(1, t.tree_segment_bytes / size_of(type));
    return 2 * window * seg * size_of(type);
  }

  bool finished() const {
    return reduced_ == segments_ && down_done_ == segments_ &&
           pending_sends_.empty();
  }

  /// Advances whatever can advance; true if anything did.
  bool poll() {
    bool progress = false;
    const int children = node_.child_count();
    // 1. Keep up to `window` segments of children's contributions in flight.
    while (children > 0 && up_posted_ < segments_ && up_posted_ < reduced_ + window_) {
      const std::size_t k = up_posted_++;
      const std::size_t slot = k % window_;
      for (int c = 0; c < 2; ++c) {
        if (node_.children[c] < 0) continue;
        child_recv_[slot * 2 + c] =
            t_.irecv(scratch(slot, c), length(k) * elem_, node_.children[c], up_tag_);
      }
      progress = true;
    }
    // 2. Reduce the next segment once all its children's parts are in (the first reduction reads
    //    the input segment, so a leaf sends its input as it lies); pass it on.
    while (reduced_ < segments_ && (children == 0 || reduced_ < up_posted_)) {
      const std::size_t k = reduced_, slot = k % window_;
      bool ready = true;
      for (int c = 0; c < 2; ++c) {
        if (node_.children[c] >= 0 && !t_.test(child_recv_[slot * 2 + c])) ready = false;
      }
      if (!ready) break;
      const std::byte* partial = input_segment(k);
      for (int c = 0; c < 2; ++c) {
        if (node_.children[c] < 0) continue;
        reduce_to(segment(k), partial, scratch(slot, c), length(k), type_, op_);  // in place after the first
        partial = segment(k);
      }
      if (node_.parent >= 0) {
        up_send_.push_back(t_.isend(partial, length(k) * elem_, node_.parent, up_tag_));
      } else {
        send_down(k);  // the root turns the segment around at once
        ++down_done_;
      }
      ++reduced_;
      progress = true;
    }
    // 3. Non-root: once segment k has left for the parent, receive its result in place.
    while (node_.parent >= 0 && down_posted_ < up_send_.size() && t_.test(up_send_[down_posted_])) {
      down_recv_.push_back(t_.irecv(segment(down_posted_), length(down_posted_) * elem_, node_.parent, down_tag_));
      ++down_posted_;
      progress = true;
    }
    // 4. Forward results to the children in order.
    while (node_.parent >= 0 && down_done_ < down_recv_.size() && t_.test(down_recv_[down_done_])) {
      send_down(down_done_);
      ++down_done_;
      progress = true;
    }
    // 5. Retire completed sends.
    while (!pending_sends_.empty() && t_.test(pending_sends_.front())) {
      pending_sends_.pop_front();
      progress = true;
    }
    return progress;
  }

  /// The requests still pending, for a timeout diagnostic.
  /// The not-done requests; with `due`, also a placeholder for the parent's result when its
  /// receive is not posted yet (for the timeout diagnostic; it has no request to wait on).
  void pending(std::vector<Request>& out, bool due = true) const {
    for (const auto& r : child_recv_) if (!r.done()) out.push_back(r);
    for (const auto& r : up_send_) if (!r.done()) out.push_back(r);
    for (const auto& r : down_recv_) if (!r.done()) out.push_back(r);
    for (const auto& r : pending_sends_) if (!r.done()) out.push_back(r);
    if (due && node_.parent >= 0 && down_posted_ < segments_ && up_send_.size() < segments_) {
      out.push_back(Request{0, node_.parent, false});  // the parent's result is still due
    }
  }

 private:
  std::byte* segment(std::size_t k) const { return data_ + (begin_ + k * seg_) * elem_; }
  const std::byte* input_segment(std::size_t k) const { return in_ + (begin_ + k * seg_) * elem_; }
  std::size_t length(std::size_t k) const { return std::min(seg_, end_ - (begin_ + k * seg_)); }
  std::byte* scratch(std::size_t slot, int child) const { return scratch_ + (slot * 2 + child) * seg_ * elem_; }
  void send_down(std::size_t k) {
    for (int c = 0; c < 2; ++c) {
      if (node_.children[c] >= 0) {
        pending_sends_.push_back(t_.isend(segment(k), length(k) * elem_, node_.children[c], down_tag_));
      }
    }
  }

  Transport& t_;
  TreeNode node_;
  Tag up_tag_, down_tag_;
  std::size_t elem_, seg_;
  const std::byte* in_;  ///< the caller's input (may be data_): read by a segment's first step
  std::byte* data_;
  std::size_t begin_, segments_, end_;
  DataType type_;
  ReduceOp op_;
  std::byte* scratch_;
  std::size_t window_;
  std::vector<Request> child_recv_;
  std::vector<Request> up_send_, down_recv_;
  std::deque<Request> pending_sends_;
  std::size_t up_posted_ = 0, reduced_ = 0, down_posted_ = 0, down_done_ = 0;
};

void double_binary_tree(CollContext& ctx, const std::byte* in, std::byte* data, std::size_t count, DataType type,
                        ReduceOp op) {
  constexpr std::size_t window = 4;  // segments in flight per child: enough to cover α
  const std::size_t per_tree = TreePipeline::scratch_bytes(ctx.tuning, type, window);
  std::byte* scratch = ctx.scratch_bytes(2 * per_tree);
  const std::size_t half = count / 2;
  TreePipeline a(ctx, 0, in, data, 0, half, type, op, scratch, window);
  TreePipeline b(ctx, 1, in, data, half, count, type, op, scratch + per_tree, window);
  SpinWait spin(ctx.policy);
  while (!(a.finished() && b.finished())) {
    const bool progressed_a = a.poll();
    const bool progressed_b = b.poll();
    if (progressed_a || progressed_b) {
      spin.reset_spins();
      continue;
    }
#ifdef HPCTRAIN_SMPI
    {
      // Copies of the pipelines' requests: block_until_any needs only their slots, and poll()
      // then finds the completed one.
      std::vector<Request> posted;
      a.pending(posted, false);
      b.pending(posted, false);
      block_until_any(ctx.transport, posted.data(), posted.size());
    }
#endif
    if (spin.expired()) {
      std::vector<Request> pending;
      a.pending(pending);
      b.pending(pending);
      spin.fail(ctx.transport, pending.data(), pending.size());
    }
  }
}

}  // namespace

void binomial_broadcast(CollContext& ctx, void* buf, std::size_t bytes, int root) {
  if (ctx.transport.size() == 1) return;
  binomial_broadcast_tagged(ctx, buf, bytes, root, ctx.base_tag | kBinomialBcastTag);
}

void tree_allreduce(CollContext& ctx, const void* send, void* recv, std::size_t count, DataType type,
                    ReduceOp op) {
  const auto* in = static_cast<const std::byte*>(send);
  auto* data = static_cast<std::byte*>(recv);
  const std::size_t bytes = count * size_of(type);
  if (ctx.transport.size() == 1 || count == 0) {
    if (in != data && bytes) std::memcpy(data, in, bytes);
    return;
  }
  if (bytes <= ctx.tuning.tree_binomial_max_bytes) {
    binomial_allreduce(ctx, in, data, count, type, op);
    return;
  }
  double_binary_tree(ctx, in, data, count, type, op);
}

void dissemination_barrier(CollContext& ctx) {
  Transport& t = ctx.transport;
  const int p = t.size(), r = t.rank();
  constexpr Tag kBarrierTag = 32;
  for (int distance = 1; distance < p; distance <<= 1) {
    std::array<Request, 2> reqs = {t.irecv(nullptr, 0, (r - distance + p) % p, ctx.base_tag | kBarrierTag),
                                   t.isend(nullptr, 0, (r + distance) % p, ctx.base_tag | kBarrierTag)};
    wait_all(t, reqs.data(), reqs.size(), ctx.policy);
  }
}

}  // namespace hpctrain::coll::detail
