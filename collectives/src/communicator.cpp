#include "hpctrain/collectives/communicator.hpp"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "algorithms.hpp"
#include "progress_engine.hpp"
#include "hpctrain/collectives/error.hpp"
#include "reduce.hpp"
#include "vendor_call_watchdog.hpp"

namespace hpctrain::coll {

// ---- Communicator -----------------------------------------------------------------------

namespace {

Tag base_tag(std::uint64_t sequence) { return detail::sequence_tag(sequence); }

void check_buffers(const char* op, const void* send, const void* recv, std::size_t count,
                   std::size_t send_elems, std::size_t recv_elems, DataType type, int rank) {
  // Only formatted on failure: this runs on every call, also for 8-byte all-reduces.
  auto where = [&] {
    return std::string(op) + "(count=" + std::to_string(count) + ", " + std::string(to_string(type)) + ")";
  };
  HPCTRAIN_REQUIRE(send_elems == 0 || send != nullptr, where() + ": send buffer is null");
  HPCTRAIN_REQUIRE(recv_elems == 0 || recv != nullptr, where() + ": receive buffer is null");
  if (send && recv && send != recv && send_elems && recv_elems) {
    const auto* s = static_cast<const std::byte*>(send);
    const auto* r = static_cast<const std::byte*>(recv);
    const std::size_t e = size_of(type);
    const bool overlap = s < r + recv_elems * e && r < s + send_elems * e;
    HPCTRAIN_REQUIRE(!overlap, where() + ": send and receive buffers overlap without being the same "
                               "buffer (pass the same pointer for in-place)");
  }
}

}  // namespace

Communicator::Communicator(std::unique_ptr<Transport> transport)
    : Communicator(std::move(transport), Tuning::from_environment()) {}

Communicator::Communicator(std::unique_ptr<Transport> transport, Tuning tuning)
    : transport_(std::move(transport)), tuning_(tuning) {
  HPCTRAIN_REQUIRE(transport_ != nullptr, "Communicator: null transport");
  // The node map needs a collective on the MPI and UCX transports (MPI_Comm_split_type): done
  // here, where construction is collective anyway, rather than hidden in the first automatic
  // all-reduce, where a missing rank would hang in MPI instead of hitting our timeout.
  const detail::VendorCallWatch watch({"MPI_Comm_split_type", "node map", 0, 0, DataType::f32, size()},
                                      tuning_.timeout_s);
  node_of_rank();
}

Communicator::~Communicator() = default;  // the engine runs its queue and joins

Communicator::Communicator(Communicator&& other) noexcept {
  other.engine_.reset();  // runs the queued work (it points at `other`) and joins
  transport_ = std::move(other.transport_);
  tuning_ = other.tuning_;
  scratch_ = std::move(other.scratch_);
  sequence_ = other.sequence_;
  node_of_rank_ = std::move(other.node_of_rank_);
  ranks_per_node_ = other.ranks_per_node_;
  node_ = std::move(other.node_);
}

Communicator& Communicator::operator=(Communicator&& other) noexcept {
  if (this != &other) {
    engine_.reset();
    other.engine_.reset();
    transport_ = std::move(other.transport_);
    tuning_ = other.tuning_;
    scratch_ = std::move(other.scratch_);
    sequence_ = other.sequence_;
    node_of_rank_ = std::move(other.node_of_rank_);
    ranks_per_node_ = other.ranks_per_node_;
    node_ = std::move(other.node_);
  }
  return *this;
}

int Communicator::rank() const noexcept { return transport_->rank(); }
int Communicator::size() const noexcept { return transport_->size(); }

void Communicator::drain() const {
  if (engine_) engine_->drain();
}

WaitPolicy Communicator::policy(const char* op, Algorithm algo, std::uint64_t seq) const {
  WaitPolicy p;
  p.timeout = std::chrono::duration<double>(tuning_.timeout_s);
  p.spin_polls = tuning_.spin_polls;
  p.op = op;  // the diagnostic text is composed only if a wait fails (WaitPolicy::description)
  p.algorithm = algo;
  // The collective's own number, never sequence_: a queued collective runs on the progress
  // thread while the caller's thread increments sequence_ (a data race found by TSan).
  p.sequence = seq;
  p.transport = transport_.get();
  return p;
}

const std::vector<int>& Communicator::node_of_rank() {
  if (!node_of_rank_.empty()) return node_of_rank_;
  const int p = size();
  std::vector<int> node(static_cast<std::size_t>(p));
  if (tuning_.ranks_per_node > 0) {
    for (int r = 0; r < p; ++r) node[static_cast<std::size_t>(r)] = r / tuning_.ranks_per_node;
  } else {
    // Machines numbered in order of their first rank.
    const std::vector<int> domains = transport_->shared_memory_domains();
    HPCTRAIN_REQUIRE(domains.size() == static_cast<std::size_t>(p),
                     "shared_memory_domains: " + std::to_string(domains.size()) + " entries for " +
                         std::to_string(p) + " ranks");
    std::vector<int> seen;
    for (int r = 0; r < p; ++r) {
      const int d = domains[static_cast<std::size_t>(r)];
      const auto it = std::find(seen.begin(), seen.end(), d);
      node[static_cast<std::size_t>(r)] = static_cast<int>(it - seen.begin());
      if (it == seen.end()) seen.push_back(d);
    }
  }
  node_of_rank_ = std::move(node);
  return node_of_rank_;
}

int Communicator::ranks_per_node() {
  if (ranks_per_node_ > 0) return ranks_per_node_;
  const auto& node = node_of_rank();
  std::vector<int> count(node.size(), 0);
  for (int n : node) ++count[static_cast<std::size_t>(n)];
  ranks_per_node_ = *std::max_element(count.begin(), count.end());
  return ranks_per_node_;
}

detail::NodeGroup& Communicator::node_group(const WaitPolicy& wait_policy) {
  if (node_) {
    HPCTRAIN_REQUIRE(!node_->broken, "allreduce(" + std::string(to_string(wait_policy.algorithm)) +
                                         "): an earlier shared-memory all-reduce on this communicator "
                                         "failed part-way; its node barrier state is inconsistent");
    return *node_;
  }
  const auto& node = node_of_rank();
  const int me = rank(), my_node = node[static_cast<std::size_t>(me)];
  const int nodes = *std::max_element(node.begin(), node.end()) + 1;
  std::vector<int> sizes(static_cast<std::size_t>(nodes), 0);
  for (int n : node) ++sizes[static_cast<std::size_t>(n)];
  const detail::VendorCallWatch watch(
      {"MPI_Comm_split, MPI_Win_allocate_shared", "shared-memory set-up", wait_policy.sequence, 0, DataType::f32, size()},
      tuning_.timeout_s);
  auto g = std::make_unique<detail::NodeGroup>();
  for (int r = 0; r < size(); ++r)
    if (node[static_cast<std::size_t>(r)] == my_node) g->parent_rank.push_back(r);
  g->nodes = nodes;
  g->slices = *std::min_element(sizes.begin(), sizes.end());
  g->local = transport_->split(my_node, me);
  if (nodes > 1) g->inter = transport_->split(g->local->rank(), me);
  // Staging buffers a whole number of cache lines, so every segment's buffers stay aligned.
  g->segment_bytes = (tuning_.shm_segment_bytes + 63) / 64 * 64;
  g->memory = g->local->shared_memory(detail::shm_bytes_per_rank(g->segment_bytes));
  detail::CollContext local_ctx{*g->local, tuning_, wait_policy, detail::sequence_tag(0), scratch_};
  detail::shm_prepare(local_ctx, *g);
  node_ = std::move(g);
  return *node_;
}

namespace detail {

void point_to_point_allreduce(CollContext& ctx, Algorithm algo, const void* send, void* recv, std::size_t count,
                              DataType type, ReduceOp op) {
  const std::size_t bytes = count * size_of(type);
  switch (algo) {
    case Algorithm::ring: ring_allreduce(ctx, send, recv, count, type, op); break;
    case Algorithm::tree:
      if (send != recv && bytes) std::memcpy(recv, send, bytes);
      tree_allreduce(ctx, recv, count, type, op);
      break;
    case Algorithm::recursive_doubling:
      if (send != recv && bytes) std::memcpy(recv, send, bytes);
      recursive_doubling_allreduce(ctx, recv, count, type, op);
      break;
    case Algorithm::rabenseifner: rabenseifner_allreduce(ctx, send, recv, count, type, op); break;
    default: HPCTRAIN_FAIL("point_to_point_allreduce: '" + std::string(to_string(algo)) + "' is not a point-to-point algorithm");
  }
}

}  // namespace detail

void Communicator::run_allreduce(const void* send, void* recv, std::size_t count, DataType type,
                                 ReduceOp op, Algorithm algo, std::uint64_t seq) {
  const std::size_t bytes = count * size_of(type);
  if (algo == Algorithm::automatic) algo = tuning_.choose_allreduce(bytes, size(), ranks_per_node());
  if (algo == Algorithm::mpi) {
    const detail::VendorCallWatch watch({"MPI_Allreduce", "allreduce(mpi)", seq, count, type, size()},
                                        tuning_.timeout_s);
    HPCTRAIN_REQUIRE(transport_->vendor_allreduce(send, recv, count, type, op),
                     "allreduce: algorithm 'mpi' (MPI_Allreduce) needs the MPI transport; this "
                     "communicator runs over '" + transport_->name() + "'");
    return;
  }
  const WaitPolicy wait_policy = policy("allreduce", algo, seq);
  detail::CollContext ctx{*transport_, tuning_, wait_policy, base_tag(seq), scratch_};
  const ReduceOp combine = detail::combine_op(op);
  switch (algo) {
    case Algorithm::ring:
    case Algorithm::tree:
    case Algorithm::recursive_doubling:
    case Algorithm::rabenseifner: detail::point_to_point_allreduce(ctx, algo, send, recv, count, type, combine); break;
    case Algorithm::shm:
    case Algorithm::hierarchical: {
      if (algo == Algorithm::shm) {
        const int per_node = ranks_per_node();
        HPCTRAIN_REQUIRE(per_node == size(),
                         "allreduce: algorithm 'shm' needs every rank on one node, but the " +
                             std::to_string(size()) + " ranks of this communicator span several nodes (at most " +
                             std::to_string(per_node) + " per node" +
                             (tuning_.ranks_per_node > 0
                                  ? ", HPCTRAIN_RANKS_PER_NODE=" + std::to_string(tuning_.ranks_per_node)
                                  : std::string()) +
                             "); use 'hierarchical' for several nodes");
      }
      detail::NodeGroup& node = node_group(wait_policy);
      try {
        if (algo == Algorithm::shm) {
          detail::shm_allreduce(ctx, node, send, recv, count, type, combine);
        } else {
          detail::hierarchical_allreduce(ctx, node, send, recv, count, type, combine);
        }
      } catch (...) {
        node.broken = true;  // peers may be at another barrier: later calls must not run
        throw;
      }
      break;
    }
    case Algorithm::automatic:
    case Algorithm::mpi: HPCTRAIN_FAIL("allreduce: unresolved algorithm");
  }
  if (op == ReduceOp::avg) detail::divide_by(recv, count, type, size());
}

void Communicator::allreduce(const void* send, void* recv, std::size_t count, DataType type,
                             ReduceOp op, Algorithm algo) {
  check_buffers("allreduce", send, recv, count, count, count, type, rank());
  if (algo == Algorithm::automatic) algo = tuning_.allreduce_algorithm;
  drain();
  run_allreduce(send, recv, count, type, op, algo, sequence_++);
}

Work Communicator::iallreduce(const void* send, void* recv, std::size_t count, DataType type,
                              ReduceOp op, Algorithm algo) {
  check_buffers("iallreduce", send, recv, count, count, count, type, rank());
  if (algo == Algorithm::automatic) algo = tuning_.allreduce_algorithm;
  const std::uint64_t seq = sequence_++;
  return Work(engine().submit([=] { run_allreduce(send, recv, count, type, op, algo, seq); }));
}

void Communicator::run_reduce_scatter(const void* send, void* recv, std::size_t recv_count, DataType type,
                                      ReduceOp op, std::uint64_t seq) {
  if (recv_count == 0) return;
  const std::size_t p = static_cast<std::size_t>(size());
  const std::size_t elem = size_of(type);
  // The ring reduces in place, so it works on a copy of the send buffer.
  std::vector<std::byte> work(static_cast<const std::byte*>(send),
                              static_cast<const std::byte*>(send) + recv_count * p * elem);
  std::vector<std::size_t> offsets(p + 1);
  for (std::size_t b = 0; b <= p; ++b) offsets[b] = b * recv_count;
  const WaitPolicy wait_policy = policy("reduce_scatter", Algorithm::ring, seq);
  detail::CollContext ctx{*transport_, tuning_, wait_policy, base_tag(seq), scratch_};
  detail::ring_reduce_scatter(ctx, work.data(), work.data(), offsets, type, detail::combine_op(op));
  std::memcpy(recv, work.data() + static_cast<std::size_t>(rank()) * recv_count * elem, recv_count * elem);
  if (op == ReduceOp::avg) detail::divide_by(recv, recv_count, type, size());
}

void Communicator::run_allgather(const void* send, void* recv, std::size_t count, DataType type, std::uint64_t seq) {
  if (count == 0) return;
  const std::size_t p = static_cast<std::size_t>(size());
  const std::size_t elem = size_of(type);
  auto* own = static_cast<std::byte*>(recv) + static_cast<std::size_t>(rank()) * count * elem;
  if (send != own) std::memcpy(own, send, count * elem);
  std::vector<std::size_t> offsets(p + 1);
  for (std::size_t b = 0; b <= p; ++b) offsets[b] = b * count;
  const WaitPolicy wait_policy = policy("allgather", Algorithm::ring, seq);
  detail::CollContext ctx{*transport_, tuning_, wait_policy, base_tag(seq), scratch_};
  detail::ring_allgather(ctx, recv, offsets, type);
}

void Communicator::run_balanced_reduce_scatter(void* buf, std::size_t count, DataType type, ReduceOp op,
                                               std::uint64_t seq) {
  if (count == 0) return;
  const auto offsets = detail::balanced_offsets(count, size());
  const WaitPolicy wait_policy = policy("reduce_scatter(in place)", Algorithm::ring, seq);
  detail::CollContext ctx{*transport_, tuning_, wait_policy, base_tag(seq), scratch_};
  detail::ring_reduce_scatter(ctx, buf, buf, offsets, type, detail::combine_op(op));
  if (op == ReduceOp::avg) {
    const auto r = static_cast<std::size_t>(rank());
    detail::divide_by(static_cast<std::byte*>(buf) + offsets[r] * size_of(type), offsets[r + 1] - offsets[r], type,
                      size());
  }
}

void Communicator::run_balanced_allgather(void* buf, std::size_t count, DataType type, std::uint64_t seq) {
  if (count == 0) return;
  const auto offsets = detail::balanced_offsets(count, size());
  const WaitPolicy wait_policy = policy("allgather(in place)", Algorithm::ring, seq);
  detail::CollContext ctx{*transport_, tuning_, wait_policy, base_tag(seq), scratch_};
  detail::ring_allgather(ctx, buf, offsets, type);
}

ProgressEngine& Communicator::engine() {
  if (!engine_) engine_ = std::make_unique<ProgressEngine>();
  return *engine_;
}

void Communicator::reduce_scatter(const void* send, void* recv, std::size_t recv_count, DataType type,
                                  ReduceOp op) {
  const std::size_t p = static_cast<std::size_t>(size());
  check_buffers("reduce_scatter", send, recv, recv_count, recv_count * p, recv_count, type, rank());
  drain();
  run_reduce_scatter(send, recv, recv_count, type, op, sequence_++);
}

Work Communicator::ireduce_scatter(const void* send, void* recv, std::size_t recv_count, DataType type,
                                   ReduceOp op) {
  const std::size_t p = static_cast<std::size_t>(size());
  check_buffers("ireduce_scatter", send, recv, recv_count, recv_count * p, recv_count, type, rank());
  const std::uint64_t seq = sequence_++;
  return Work(engine().submit([=] { run_reduce_scatter(send, recv, recv_count, type, op, seq); }));
}

void Communicator::allgather(const void* send, void* recv, std::size_t count, DataType type) {
  const std::size_t p = static_cast<std::size_t>(size());
  auto* own = static_cast<std::byte*>(recv) + static_cast<std::size_t>(rank()) * count * size_of(type);
  if (send != own) check_buffers("allgather", send, recv, count, count, count * p, type, rank());
  drain();
  run_allgather(send, recv, count, type, sequence_++);
}

Work Communicator::iallgather(const void* send, void* recv, std::size_t count, DataType type) {
  const std::size_t p = static_cast<std::size_t>(size());
  auto* own = static_cast<std::byte*>(recv) + static_cast<std::size_t>(rank()) * count * size_of(type);
  if (send != own) check_buffers("iallgather", send, recv, count, count, count * p, type, rank());
  const std::uint64_t seq = sequence_++;
  return Work(engine().submit([=] { run_allgather(send, recv, count, type, seq); }));
}

Work Communicator::ireduce_scatter_in_place(void* buf, std::size_t count, DataType type, ReduceOp op) {
  check_buffers("ireduce_scatter_in_place", buf, buf, count, count, count, type, rank());
  const std::uint64_t seq = sequence_++;
  return Work(engine().submit([=] { run_balanced_reduce_scatter(buf, count, type, op, seq); }));
}

Work Communicator::iallgather_in_place(void* buf, std::size_t count, DataType type) {
  check_buffers("iallgather_in_place", buf, buf, count, count, count, type, rank());
  const std::uint64_t seq = sequence_++;
  return Work(engine().submit([=] { run_balanced_allgather(buf, count, type, seq); }));
}

BlockRange balanced_block(std::size_t count, int parts, int index) noexcept {
  const auto p = static_cast<std::size_t>(parts), b = static_cast<std::size_t>(index);
  const std::size_t base = count / p, extra = count % p;
  return BlockRange{b * base + std::min(b, extra), base + (b < extra ? 1 : 0)};
}

void Communicator::broadcast(void* buf, std::size_t count, DataType type, int root) {
  HPCTRAIN_REQUIRE(root >= 0 && root < size(), "broadcast: root " + std::to_string(root) +
                                                   " outside [0, " + std::to_string(size()) + ")");
  check_buffers("broadcast", buf, buf, count, count, count, type, rank());
  drain();
  const std::uint64_t seq = sequence_++;
  if (count == 0) return;
  const WaitPolicy wait_policy = policy("broadcast", Algorithm::tree, seq);
  detail::CollContext ctx{*transport_, tuning_, wait_policy, base_tag(seq), scratch_};
  detail::binomial_broadcast(ctx, buf, count * size_of(type), root);
}

void Communicator::barrier() {
  drain();
  const std::uint64_t seq = sequence_++;
  const WaitPolicy wait_policy = policy("barrier", Algorithm::tree, seq);
  detail::CollContext ctx{*transport_, tuning_, wait_policy, base_tag(seq), scratch_};
  detail::dissemination_barrier(ctx);
}

Communicator Communicator::split(int color, int key) const {
  drain();
  return Communicator(transport_->split(color, key), tuning_);
}

}  // namespace hpctrain::coll
