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

}  // namespace hpctrain::coll::detail
