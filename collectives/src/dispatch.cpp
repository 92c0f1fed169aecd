// The one dispatch point: which algorithm runs each collective. Every all-reduce algorithm
// takes (send, recv), send == recv in place, and reads its input where it lies (no copy into
// the output first); `avg` is reduced as a sum and divided here, once.

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "algorithms.hpp"
#include "communicator_impl.hpp"
#include "hpctrain/base/error.hpp"
#include "modelled_algorithms.hpp"
#include "reduce.hpp"
#include "vendor_call_watchdog.hpp"

namespace hpctrain::coll {

namespace detail {

void point_to_point_allreduce(CollContext& ctx, Algorithm algo, const void* send, void* recv, std::size_t count,
                              DataType type, ReduceOp op) {
  switch (algo) {
    case Algorithm::ring: ring_allreduce(ctx, send, recv, count, type, op); break;
    case Algorithm::tree: tree_allreduce(ctx, send, recv, count, type, op); break;
    case Algorithm::recursive_doubling: recursive_doubling_allreduce(ctx, send, recv, count, type, op); break;
    case Algorithm::rabenseifner: rabenseifner_allreduce(ctx, send, recv, count, type, op); break;
    default: HPCTRAIN_FAIL("point_to_point_allreduce: '" + std::string(to_string(algo)) + "' is not a point-to-point algorithm");
  }
}

}  // namespace detail

namespace {

/// Refuses `shm` when the ranks span several (virtual) nodes.
void require_one_node(const char* op, int ranks, int per_node, int tuned_ranks_per_node) {
  HPCTRAIN_REQUIRE(per_node == ranks,
                   std::string(op) + ": algorithm 'shm' needs every rank on one node, but the " + std::to_string(ranks) +
                       " ranks of this communicator span several nodes (at most " + std::to_string(per_node) +
                       " per node" +
                       (tuned_ranks_per_node > 0 ? ", HPCTRAIN_RANKS_PER_NODE=" + std::to_string(tuned_ranks_per_node)
                                                 : std::string()) +
                       "); use 'hierarchical' for several nodes");
}

/// Appended to the refusal of algorithm `mpi`: why no transport here has MPI_Allreduce.
#ifdef HPCTRAIN_HAVE_MPI
constexpr const char* kNoMpiNote = "";
#else
constexpr const char* kNoMpiNote = " (this build has no MPI: HPCTRAIN_ENABLE_MPI=OFF)";
#endif

/// Under SimGrid's SMPI (a build with HPCTRAIN_SMPI) the shared-memory algorithms cannot run:
/// SMPI 3.32's MPI_Win_allocate_shared does not give the ranks of a host memory they share (shm
/// then returned wrong sums, measured), and a rank spinning on a shared-memory flag never hands
/// the simulator control, so its peers would never run. Refused before any message.
void refuse_shared_memory_under_smpi(const char* op, Algorithm algo) {
#ifdef HPCTRAIN_SMPI
  HPCTRAIN_FAIL(std::string(op) + ": algorithm '" + std::string(to_string(algo)) +
                "' needs node shared memory, which SimGrid's SMPI does not simulate (its shared "
                "windows are not shared, and flag waits never yield to the simulator); use ring, "
                "tree, recursive_doubling or rabenseifner (docs/simulation.md)");
#else
  (void)op;
  (void)algo;
#endif
}

}  // namespace

void Communicator::Impl::on_node_group(const char* op, Algorithm algo, const WaitPolicy& wait_policy,
                                       const std::function<void(detail::NodeGroup&)>& body) {
  refuse_shared_memory_under_smpi(op, algo);
  if (algo == Algorithm::shm) require_one_node(op, size(), ranks_per_node(), tuning.ranks_per_node);
  detail::NodeGroup& group = node_group(wait_policy);
  try {
    body(group);
  } catch (...) {
    group.broken = true;  // peers may be at another barrier: later calls must not run on it
    throw;
  }
}

void Communicator::Impl::run_allreduce(const void* send, void* recv, std::size_t count, DataType type,
                                       ReduceOp op, Algorithm algo, std::uint64_t seq) {
  const std::size_t bytes = count * size_of(type);
  if (algo == Algorithm::automatic) algo = tuning.choose_allreduce(bytes, size(), ranks_per_node());
  if (algo == Algorithm::nccl) detail::refuse_nccl_on_host("allreduce");  // device buffers: run_nccl_allreduce
  if (algo == Algorithm::mpi) {
    const detail::VendorCallWatch watch({"MPI_Allreduce", "allreduce(mpi)", seq, count, type, size()},
                                        tuning.timeout_s);
    HPCTRAIN_REQUIRE(transport->vendor_allreduce(send, recv, count, type, op),
                     "allreduce: algorithm 'mpi' (MPI_Allreduce) needs the MPI transport; this "
                     "communicator runs over '" + transport->name() + "'" + kNoMpiNote);
    return;
  }
  const WaitPolicy wait_policy = policy("allreduce", algo, seq);
  detail::CollContext ctx = context(wait_policy, seq);
  const ReduceOp combine = detail::combine_op(op);
  switch (algo) {
    case Algorithm::ring:
    case Algorithm::tree:
    case Algorithm::recursive_doubling:
    case Algorithm::rabenseifner: detail::point_to_point_allreduce(ctx, algo, send, recv, count, type, combine); break;
    case Algorithm::shm:
    case Algorithm::hierarchical:
      on_node_group("allreduce", algo, wait_policy, [&](detail::NodeGroup& group) {
        if (algo == Algorithm::shm) detail::shm_allreduce(ctx, group, send, recv, count, type, combine);
        else detail::hierarchical_allreduce(ctx, group, send, recv, count, type, combine);
      });
      break;
    case Algorithm::automatic:
    case Algorithm::mpi:
    case Algorithm::nccl: HPCTRAIN_FAIL("allreduce: unresolved algorithm");
  }
  if (op == ReduceOp::avg) detail::divide_by(recv, count, type, size());
}

namespace {

void block_offsets(std::vector<std::size_t>& offsets, std::size_t block, std::size_t p) {
  offsets.resize(p + 1);
  for (std::size_t b = 0; b <= p; ++b) offsets[b] = b * block;
}

/// shm or hierarchical reduce-scatter on the node group: this rank's reduced block to `own`.
void node_reduce_scatter(detail::CollContext& ctx, detail::NodeGroup& group, Algorithm algo, const void* send,
                         void* own, const std::vector<std::size_t>& offsets, DataType type, ReduceOp op) {
  if (algo == Algorithm::shm) {
    detail::shm_reduce_scatter(ctx, group, send, own, detail::block_parts(offsets), type, op);
  } else {
    detail::hierarchical_reduce_scatter(ctx, group, send, own, offsets, type, op);
  }
}

}  // namespace

void Communicator::Impl::scatter_blocks(const char* op_name, Algorithm algo, std::uint64_t seq, const void* send,
                                        void* buf, const std::vector<std::size_t>& offsets, DataType type,
                                        ReduceOp op) {
  const WaitPolicy wait_policy = policy(op_name, algo, seq);
  detail::CollContext ctx = context(wait_policy, seq);
  if (algo == Algorithm::shm || algo == Algorithm::hierarchical) {
    auto* own = static_cast<std::byte*>(buf) + offsets[static_cast<std::size_t>(rank())] * size_of(type);
    on_node_group(op_name, algo, wait_policy, [&](detail::NodeGroup& group) {
      node_reduce_scatter(ctx, group, algo, send, own, offsets, type, op);
    });
  } else if (algo == Algorithm::rabenseifner) {
    detail::halving_reduce_scatter(ctx, send, buf, offsets, type, op);
  } else {
    detail::ring_reduce_scatter(ctx, send, buf, offsets, type, op);
  }
}

void Communicator::Impl::gather_blocks(const char* op_name, Algorithm algo, std::uint64_t seq, void* buf,
                                       const std::vector<std::size_t>& offsets, DataType type) {
  const WaitPolicy wait_policy = policy(op_name, algo, seq);
  detail::CollContext ctx = context(wait_policy, seq);
  if (algo == Algorithm::shm || algo == Algorithm::hierarchical) {
    on_node_group(op_name, algo, wait_policy, [&](detail::NodeGroup& group) {
      if (algo == Algorithm::hierarchical) {
        detail::hierarchical_allgather(ctx, group, buf, offsets, type);
        return;
      }
      const auto* own = static_cast<std::byte*>(buf) + offsets[static_cast<std::size_t>(rank())] * size_of(type);
      detail::shm_allgather(ctx, group, own, buf, detail::block_parts(offsets), type);
    });
  } else if (algo == Algorithm::rabenseifner) {
    detail::doubling_allgather(ctx, buf, offsets, type);
  } else {
    detail::ring_allgather(ctx, buf, offsets, type);
  }
}

/// `auto` for reduce-scatter / all-gather: the cost model's choice, except `hierarchical` over
/// nodes of unequal size (which it cannot run; the model only sees the largest node). An
/// explicit `hierarchical` there is refused at every rank alike, before any message.
Algorithm Communicator::Impl::resolve_scatter_gather(const char* op, Algorithm algo, std::size_t bytes, bool reduce) {
  if (algo == Algorithm::hierarchical && !uniform_nodes()) {
    std::vector<int> sizes;
    for (int n : node_of_rank()) {
      if (static_cast<std::size_t>(n) >= sizes.size()) sizes.resize(static_cast<std::size_t>(n) + 1, 0);
      ++sizes[static_cast<std::size_t>(n)];
    }
    std::string list;
    for (int k : sizes) list += (list.empty() ? "" : ", ") + std::to_string(k);
    HPCTRAIN_FAIL(std::string(op) + ": algorithm 'hierarchical' needs nodes of equal size, but the " +
                  std::to_string(sizes.size()) + " nodes of this communicator hold " + list + " ranks" +
                  (tuning.ranks_per_node > 0 ? " (HPCTRAIN_RANKS_PER_NODE=" + std::to_string(tuning.ranks_per_node) +
                                                   " does not divide " + std::to_string(size()) + ")"
                                             : std::string()) +
                  "; use ring or rabenseifner");
  }
  if (algo != Algorithm::automatic) return algo;
  const Tuning* t = &tuning;
  Tuning unequal;  // copied only over unequal nodes, without hierarchical
  if (!uniform_nodes()) {
    unequal = tuning;
    unequal.auto_algorithms &= ~detail::bit(Algorithm::hierarchical);
    t = &unequal;
  }
  return reduce ? t->choose_reduce_scatter(bytes, size(), ranks_per_node())
                : t->choose_allgather(bytes, size(), ranks_per_node());
}

void Communicator::Impl::run_reduce_scatter(const void* send, void* recv, std::size_t recv_count, DataType type,
                                            ReduceOp op, Algorithm algo, std::uint64_t seq) {
  if (recv_count == 0) return;
  const std::size_t p = static_cast<std::size_t>(size());
  const std::size_t elem = size_of(type);
  if (p == 1) {  // the ring does nothing on one rank: its own block is the input
    if (send != recv) std::memcpy(recv, send, recv_count * elem);
    return;
  }
  algo = resolve_scatter_gather("reduce_scatter", algo, recv_count * p * elem, true);
  std::vector<std::size_t> offsets;
  block_offsets(offsets, recv_count, p);
  if (algo == Algorithm::shm || algo == Algorithm::hierarchical) {
    const WaitPolicy wait_policy = policy("reduce_scatter", algo, seq);
    detail::CollContext ctx = context(wait_policy, seq);
    on_node_group("reduce_scatter", algo, wait_policy, [&](detail::NodeGroup& group) {
      node_reduce_scatter(ctx, group, algo, send, recv, offsets, type, detail::combine_op(op));
    });  // writes only this rank's block, straight into recv
  } else {
    // The point-to-point algorithms reduce into a whole vector (the blocks other than rank()'s
    // hold partial reductions), so they work on a scratch vector; the input is read where it lies.
    std::vector<std::byte> work(recv_count * p * elem);
    scatter_blocks("reduce_scatter", algo, seq, send, work.data(), offsets, type, detail::combine_op(op));
    std::memcpy(recv, work.data() + static_cast<std::size_t>(rank()) * recv_count * elem, recv_count * elem);
  }
  if (op == ReduceOp::avg) detail::divide_by(recv, recv_count, type, size());
}

void Communicator::Impl::run_allgather(const void* send, void* recv, std::size_t count, DataType type,
                                       Algorithm algo, std::uint64_t seq) {
  if (count == 0) return;
  const std::size_t p = static_cast<std::size_t>(size());
  const std::size_t elem = size_of(type);
  algo = resolve_scatter_gather("allgather", algo, count * p * elem, false);
  auto* own = static_cast<std::byte*>(recv) + static_cast<std::size_t>(rank()) * count * elem;
  if (send != own) std::memcpy(own, send, count * elem);
  std::vector<std::size_t> offsets;
  block_offsets(offsets, count, p);
  gather_blocks("allgather", algo, seq, recv, offsets, type);
}

void Communicator::Impl::run_balanced_reduce_scatter(void* buf, std::size_t count, DataType type, ReduceOp op,
                                                     Algorithm algo, std::uint64_t seq) {
  if (count == 0) return;
  algo = resolve_scatter_gather("reduce_scatter(in place)", algo, count * size_of(type), true);
  const auto offsets = detail::balanced_offsets(count, size());
  scatter_blocks("reduce_scatter(in place)", algo, seq, buf, buf, offsets, type, detail::combine_op(op));
  if (op == ReduceOp::avg) {
    const auto r = static_cast<std::size_t>(rank());
    detail::divide_by(static_cast<std::byte*>(buf) + offsets[r] * size_of(type), offsets[r + 1] - offsets[r], type,
                      size());
  }
}

void Communicator::Impl::run_balanced_allgather(void* buf, std::size_t count, DataType type, Algorithm algo,
                                                std::uint64_t seq) {
  if (count == 0) return;
  algo = resolve_scatter_gather("allgather(in place)", algo, count * size_of(type), false);
  const auto offsets = detail::balanced_offsets(count, size());
  gather_blocks("allgather(in place)", algo, seq, buf, offsets, type);
}

void Communicator::Impl::run_broadcast(void* buf, std::size_t count, DataType type, int root, std::uint64_t seq) {
  if (count == 0) return;
  const WaitPolicy wait_policy = policy("broadcast", Algorithm::tree, seq);
  detail::CollContext ctx = context(wait_policy, seq);
  detail::binomial_broadcast(ctx, buf, count * size_of(type), root);
}

void Communicator::Impl::run_exchange(const std::vector<PeerBuffer>& sends, const std::vector<PeerBuffer>& recvs,
                                      std::uint64_t seq) {
  const WaitPolicy wait_policy = policy("exchange", Algorithm::ring, seq);
  detail::CollContext ctx = context(wait_policy, seq);
  detail::sparse_exchange(ctx, sends, recvs);
}

void Communicator::Impl::run_barrier(std::uint64_t seq) {
  const WaitPolicy wait_policy = policy("barrier", Algorithm::tree, seq);
  detail::CollContext ctx = context(wait_policy, seq);
  detail::dissemination_barrier(ctx);
}

}  // namespace hpctrain::coll
