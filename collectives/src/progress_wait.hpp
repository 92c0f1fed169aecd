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
///
/// complete_all / complete_any: wait_all's and wait_any's whole wait in an SMPI build over the
/// MPI transport: one MPI_Waitall / MPI_Waitany over the not-done requests, no MPI_Test before
/// or after (each costs the study's 100 ns of simulated time, and the tests after a completion
/// lie on the critical path: Rabenseifner ran 0.2-1 % behind SMPI's own at 256 KiB-16 MiB, the
/// same as SMPI's with tests at 1 ns). true when done so; false otherwise (another transport,
/// or not an SMPI build), and the caller polls.
#ifdef HPCTRAIN_SMPI
void block_until_any(Transport& t, Request* reqs, std::size_t n);
bool complete_all(Transport& t, Request* reqs, std::size_t n);
bool complete_any(Transport& t, Request* reqs, std::size_t n, std::size_t& index);
#else
inline void block_until_any(Transport&, Request*, std::size_t) {}
inline bool complete_all(Transport&, Request*, std::size_t) { return false; }
inline bool complete_any(Transport&, Request*, std::size_t, std::size_t&) { return false; }
#endif

}  // namespace hpctrain::coll::detail
