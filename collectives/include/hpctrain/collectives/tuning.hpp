#pragma once
/// @file
/// Every tuning knob of the collectives layer and its environment override, in one place.
///
/// | knob                    | environment variable               | default    |
/// |-------------------------|------------------------------------|------------|
/// | allreduce algorithm     | HPCTRAIN_ALLREDUCE_ALGO            | auto       |
/// | collective timeout      | HPCTRAIN_COLL_TIMEOUT_S            | 300        |
/// | ring segment size       | HPCTRAIN_RING_SEGMENT_BYTES        | 1 MiB      |
/// | ring receive window     | HPCTRAIN_RING_WINDOW               | 4          |
/// | tree segment size       | HPCTRAIN_TREE_SEGMENT_BYTES        | 256 KiB    |
/// | auto: tree below (bytes)| HPCTRAIN_AUTO_TREE_MAX_BYTES       | 64 KiB     |
/// | binomial below (bytes)  | HPCTRAIN_TREE_BINOMIAL_MAX_BYTES   | 64 KiB     |
/// | polls before yielding   | HPCTRAIN_SPIN_POLLS                | 64         |
/// | ranks per (virtual) node| HPCTRAIN_RANKS_PER_NODE            | 0 (detect) |
/// | shm staging segment     | HPCTRAIN_SHM_SEGMENT_BYTES         | 1 MiB      |
/// | shm one-step path up to | HPCTRAIN_SHM_SMALL_MAX_BYTES       | 8 KiB      |
/// | transport               | HPCTRAIN_TRANSPORT (mpi, ucx)      | mpi        |
/// | UCX: register from      | HPCTRAIN_UCX_REG_MIN_BYTES         | 0 (off)    |
/// | UCX: registrations kept | HPCTRAIN_UCX_REG_MAX_ENTRIES       | 256        |
/// | UCX: close timeout      | HPCTRAIN_UCX_CLOSE_TIMEOUT_S       | 5          |
/// | UCX: peer failure errors| HPCTRAIN_UCX_PEER_ERRORS (0, 1)    | 0          |
/// | UCX: idle progress (us) | HPCTRAIN_UCX_IDLE_PROGRESS_US      | 1000       |

#include <cstddef>
#include <string>

#include "hpctrain/collectives/types.hpp"

namespace hpctrain::coll {

/// Point-to-point layer under a communicator (make_transport, make_default_transport).
enum class TransportKind { mpi, ucx };
/// "mpi", "ucx".
const char* to_string(TransportKind k) noexcept;
/// Parses "mpi" or "ucx"; throws hpctrain::Error naming `where` otherwise.
TransportKind parse_transport_kind(const std::string& name, const char* where = "transport");

struct Tuning {
  /// Algorithm used when a call passes Algorithm::automatic. `automatic` here means: choose
  /// by size (see auto_tree_max_bytes).
  Algorithm allreduce_algorithm = Algorithm::automatic;
  /// A collective that has not completed after this many seconds fails with a TimeoutError
  /// naming the peers it waited for. 0 disables the timeout.
  double timeout_s = 300.0;
  /// Ring: messages are cut into segments of this size so reduction overlaps communication.
  std::size_t ring_segment_bytes = std::size_t{1} << 20;
  /// Ring: how many segment receives are posted ahead (bounds the scratch memory).
  std::size_t ring_window = 4;
  /// Tree: pipeline segment of the double binary tree.
  std::size_t tree_segment_bytes = std::size_t{256} << 10;
  /// Tree: messages up to this size use the binomial reduce + broadcast (latency-bound);
  /// larger ones the pipelined double binary tree.
  std::size_t tree_binomial_max_bytes = std::size_t{64} << 10;
  /// automatic: tree up to this many bytes, ring above.
  std::size_t auto_tree_max_bytes = std::size_t{64} << 10;
  /// Waits poll this many times without progress before they start yielding the core
  /// (sched_yield) between polls. Low suits oversubscribed ranks (the peer needs the core);
  /// with one rank per dedicated core a large value avoids losing the core to other processes
  /// in the middle of a collective (MPI does not yield unless it is oversubscribed).
  std::size_t spin_polls = 64;
  /// Ranks per node for the hierarchical and shared-memory algorithms. 0: detect the real
  /// nodes (MPI_COMM_TYPE_SHARED). k > 0: consecutive blocks of k ranks form virtual nodes, so
  /// the multi-node paths can be exercised and benchmarked on one machine.
  int ranks_per_node = 0;
  /// shm and hierarchical: each rank stages its input through a shared-memory buffer of this
  /// many bytes (two of them, alternating), so large messages go through in pipelined
  /// segments, the window stays small, and a segment's copy-in, reduction and copy-out stay in
  /// cache. Each segment costs two flag waits, which on a loaded machine (a peer descheduled)
  /// cost far more than the copies: 1 MiB measured faster than 256 KiB there.
  std::size_t shm_segment_bytes = std::size_t{1} << 20;
  /// shm: messages up to this size take the one-step path (every rank publishes its input,
  /// one barrier, every rank reduces all inputs itself); larger ones reduce-scatter + gather.
  std::size_t shm_small_max_bytes = std::size_t{8} << 10;

  /// Transport make_default_transport() builds.
  TransportKind transport = TransportKind::mpi;
  /// UCX: sends/receives of at least this many bytes use a memory handle from a per-transport
  /// cache of ucp_mem_map registrations keyed by (address, length), so a training loop that
  /// re-uses its gradient buffers registers each segment once. 0 (default) turns the cache off
  /// and leaves registration to UCX's own registration cache, which (unlike ours) is told when
  /// memory is freed: with ours, a buffer freed and re-allocated at the same address would keep
  /// a stale registration, which on RDMA hardware means stale data. See docs/ucx.md.
  std::size_t ucx_reg_min_bytes = 0;
  /// UCX: at most this many cached registrations per transport (beyond: unregistered sends).
  std::size_t ucx_reg_max_entries = 256;
  /// UCX: teardown waits this long for endpoints to flush and close, then closes them by force
  /// (a peer that has already gone must not hang teardown).
  double ucx_close_timeout_s = 5.0;
  /// UCX: endpoints in UCP_ERR_HANDLING_MODE_PEER, so a peer that dies fails operations with
  /// UCX's status at once (instead of our timeout naming the peer). Off by default: UCX 1.13's
  /// shared-memory transports have no peer failure handler, so with it on, ranks on one node
  /// need tcp (or an RDMA transport) to reach each other.
  bool ucx_peer_errors = false;
  /// UCX: a helper thread progresses the worker this often (microseconds) while the transport
  /// is otherwise idle, so protocol messages UCX still owes a peer after our requests completed
  /// (rendezvous acknowledgements) leave even when this rank has gone on to other work. 0
  /// disables it, which can hang a peer (see ucx_transport.cpp).
  std::size_t ucx_idle_progress_us = 1000;

  /// Defaults overridden by the HPCTRAIN_* environment variables above; a malformed value
  /// throws hpctrain::Error naming the variable.
  static Tuning from_environment();

  /// The algorithm `automatic` resolves to for a message of `bytes` over `ranks` ranks, of
  /// which `ranks_per_node` share each node (ranks_per_node == ranks: one node).
  Algorithm choose_allreduce(std::size_t bytes, int ranks, int ranks_per_node) const noexcept;
};

}  // namespace hpctrain::coll
