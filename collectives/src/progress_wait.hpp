#pragma once
// Spin-then-yield waiting with a deadline, shared by wait_all/wait_any and the algorithms'
// own event loops.

#include <chrono>
#include <cstddef>
#include <cstdint>

#include "hpctrain/collectives/transport.hpp"

namespace hpctrain::coll::detail {

class SpinWait {
 public:
  explicit SpinWait(const WaitPolicy& policy);
  /// Call once per fruitless poll; true once the policy's timeout has passed.
  bool expired();
  /// Throws TimeoutError listing the not-done requests of [reqs, reqs+n), posted on `t` (peers
  /// named by their world rank, Transport::world_rank).
  [[noreturn]] void fail(const Transport& t, const Request* reqs, std::size_t n) const;
  /// Progress was made: restart the spin phase (not the deadline).
  void reset_spins() noexcept { spins_ = 0; }

 private:
  const WaitPolicy& policy_;
  std::chrono::steady_clock::time_point start_;
  std::size_t spins_ = 0;
};

/// After a fruitless poll of [reqs, reqs+n): in a SimGrid SMPI build (HPCTRAIN_SMPI) over the
/// MPI transport, blocks in MPI_Waitany until one of the not-done requests completes (its next
/// test() then reports it), so simulated time jumps to the next completion instead of being
/// spent in polls: each MPI_Test costs simulated time (smpi/test) and a context switch of real
/// time, which made a 64-rank 16 MiB ring take 40 s of real time. Does nothing otherwise (and
/// with no request pending). A blocked rank cannot time out; SimGrid itself reports a deadlock.
#ifdef HPCTRAIN_SMPI
void block_until_any(Transport& t, Request* reqs, std::size_t n);
#else
inline void block_until_any(Transport&, Request*, std::size_t) {}
#endif

}  // namespace hpctrain::coll::detail
