#pragma once
// Internal to hpctrain::collectives: the state behind a Communicator (pimpl) and the functions
// that run one collective on it. Queued non-blocking work refers to this object, whose address
// does not change when the Communicator moves, so the Communicator's moves are defaulted.
//
//   communicator.cpp   the public API: argument checks, blocking vs queued, sequence numbers
//   dispatch.cpp       which algorithm runs each collective (the one dispatch point)
//   node_map.cpp       which ranks share a node, and the node's shared-memory group

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "algorithms.hpp"
#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/collectives/device_memory.hpp"
#include "nccl_allreduce.hpp"
#include "progress_engine.hpp"

namespace hpctrain::coll {

struct Communicator::Impl {
  Impl(std::unique_ptr<Transport> transport, Tuning tuning);

  int rank() const noexcept { return transport->rank(); }
  int size() const noexcept { return transport->size(); }

  /// Waits for queued non-blocking work.
  void drain() const {
    if (engine) engine->drain();
  }
  /// The progress thread, started on first use.
  ProgressEngine& progress_engine();
  /// The wait policy (timeout; diagnostics name the collectives issued so far).
  WaitPolicy policy(const char* op, Algorithm algo, std::uint64_t seq) const;
  /// What an algorithm gets for collective number `seq` over the transport.
  detail::CollContext context(const WaitPolicy& wait_policy, std::uint64_t seq) {
    return detail::CollContext{*transport, tuning, wait_policy, detail::sequence_tag(seq), scratch};
  }

  // ---- dispatch.cpp: one collective, on the calling or the progress thread ----
  void run_allreduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op,
                     Algorithm algo, std::uint64_t seq);
  // Reduce-scatter / all-gather: `algo` is ring, rabenseifner, shm, hierarchical or automatic
  // (checked by the caller, check_scatter_algorithm); automatic is resolved here by the cost model.
  void run_reduce_scatter(const void* send, void* recv, std::size_t recv_count, DataType type, ReduceOp op,
                          Algorithm algo, std::uint64_t seq);
  void run_allgather(const void* send, void* recv, std::size_t count, DataType type, Algorithm algo,
                     std::uint64_t seq);
  void run_balanced_reduce_scatter(void* buf, std::size_t count, DataType type, ReduceOp op, Algorithm algo,
                                   std::uint64_t seq);
  void run_balanced_allgather(void* buf, std::size_t count, DataType type, Algorithm algo, std::uint64_t seq);
  // ---- device_allreduce.cpp: MemorySpace::device buffers (needs `device`) ----
  /// Uses sequence numbers seq .. seq + device_chunks(count, type) (one per staged chunk, one
  /// for the final error agreement).
  void run_device_allreduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op,
                            Algorithm algo, std::uint64_t seq);
  std::size_t device_chunks(std::size_t count, DataType type) const noexcept;
  /// Algorithm::nccl on device buffers: ncclAllReduce over `nccl`, created at the first call
  /// with sequence numbers seq and seq + 1 (create_nccl).
  void run_nccl_allreduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op,
                          std::uint64_t seq);
  /// Collective: agrees that every rank can run NCCL on these buffers (else every rank throws,
  /// naming the highest rank that cannot and its own reason), then joins the NCCL communicator
  /// whose unique id rank 0 broadcasts.
  void create_nccl(const void* send, const void* recv, std::uint64_t seq);
  /// Collective (one 4-byte all-reduce, sequence number `seq`): the highest rank whose `failed`
  /// is true, or -1 when none is.
  int highest_failing_rank(bool failed, std::uint64_t seq);
  /// communicator.cpp: argument checks, `algo` resolved, the sequence numbers reserved.
  std::uint64_t start_device_allreduce(const char* op, const void* send, const void* recv, std::size_t count,
                                       DataType type, Algorithm& algo);
  /// Runs `body(node group)` for a shared-memory algorithm (shm, hierarchical): refused under
  /// SMPI, shm refused across nodes (naming `op`); a failure part-way marks the group broken.
  void on_node_group(const char* op, Algorithm algo, const WaitPolicy& wait_policy,
                     const std::function<void(detail::NodeGroup&)>& body);
  /// `algo`, or for automatic the cost model's choice for `bytes` (the whole vector) that can
  /// run here (hierarchical only over nodes of equal size; refused, naming `op`, otherwise).
  Algorithm resolve_scatter_gather(const char* op, Algorithm algo, std::size_t bytes, bool reduce);
  /// The block reduce-scatter of `algo` (ring, rabenseifner, shm or hierarchical, resolved): block rank() of
  /// `buf` receives the reduction.
  void scatter_blocks(const char* op_name, Algorithm algo, std::uint64_t seq, const void* send, void* buf,
                      const std::vector<std::size_t>& offsets, DataType type, ReduceOp op);
  /// The block all-gather of `algo` (resolved): block rank() of `buf` holds this rank's data.
  void gather_blocks(const char* op_name, Algorithm algo, std::uint64_t seq, void* buf,
                     const std::vector<std::size_t>& offsets, DataType type);
  void run_broadcast(void* buf, std::size_t count, DataType type, int root, std::uint64_t seq);
  void run_barrier(std::uint64_t seq);
  void run_exchange(const std::vector<PeerBuffer>& sends, const std::vector<PeerBuffer>& recvs, std::uint64_t seq);

  // ---- node_map.cpp ----
  /// (Virtual) node index of every rank: Tuning::ranks_per_node blocks, or the machines
  /// (Transport::shared_memory_domains, collective the first time).
  const std::vector<int>& node_of_rank();
  /// Largest number of ranks on one node (what choose_allreduce is told).
  int ranks_per_node();
  /// True when every node holds the same number of ranks.
  bool uniform_nodes();
  /// The node's sub-transports and shared memory, built on first use (collective: every rank
  /// calls the same all-reduce with the same algorithm, so every rank builds it at the same call).
  detail::NodeGroup& node_group(const WaitPolicy& wait_policy);

  std::unique_ptr<Transport> transport;
  Tuning tuning;
  std::vector<int> node_of_rank_;              // empty until known
  int ranks_per_node_ = 0;                     // 0 until known
  bool uniform_nodes_ = true;                  // with ranks_per_node_: every node holds that many
  std::unique_ptr<detail::NodeGroup> node;     // shm / hierarchical state, null until used
  std::vector<std::byte> scratch;  // reused across calls; one thread at a time (see drain)
  std::shared_ptr<DeviceMemory> device;   // null: device buffers are refused
  std::shared_ptr<void> staging[2];        // the pipeline's host buffers, staging_bytes each
  std::size_t staging_bytes = 0;
  detail::NcclCommPtr nccl;                // Algorithm::nccl's communicator, null until its first call
  std::uint64_t sequence = 0;      // collectives issued so far, for tags and diagnostics
  // Last: destroyed first, so queued work finishes while the members above still exist.
  std::unique_ptr<ProgressEngine> engine;
};

}  // namespace hpctrain::coll
