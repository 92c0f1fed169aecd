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

#include <cstddef>

#include "hpctrain/collectives/types.hpp"

namespace hpctrain::coll {

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

  /// Defaults overridden by the HPCTRAIN_* environment variables above; a malformed value
  /// throws hpctrain::Error naming the variable.
  static Tuning from_environment();

  /// The algorithm `automatic` resolves to for a message of `bytes` over `ranks` ranks.
  Algorithm choose_allreduce(std::size_t bytes, int ranks) const noexcept;
};

}  // namespace hpctrain::coll
