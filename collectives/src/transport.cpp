#include "hpctrain/collectives/transport.hpp"

#include <chrono>
#include <sstream>
#include <thread>

#include "hpctrain/base/error.hpp"
#include "progress_wait.hpp"

namespace hpctrain::coll {

namespace detail {

SpinWait::SpinWait(const WaitPolicy& policy)
    : policy_(policy), start_(std::chrono::steady_clock::now()) {}

bool SpinWait::expired() {
  // Spin hard for a while (lowest latency), then yield so oversubscribed ranks can run.
  ++spins_;
  if (spins_ > policy_.spin_polls) std::this_thread::yield();
  if (policy_.timeout.count() <= 0.0 || (spins_ & 255u) != 0) return false;
  return std::chrono::steady_clock::now() - start_ > policy_.timeout;
}

void SpinWait::fail(const Transport& t, const Request* reqs, std::size_t n) const {
  std::ostringstream os;
  os << policy_.description() << " did not complete within "
     << policy_.timeout.count() << " s (HPCTRAIN_COLL_TIMEOUT_S); still waiting for:";
  bool any = false;
  for (std::size_t i = 0; i < n; ++i) {
    if (reqs[i].done()) continue;
    const int peer = reqs[i].peer, world = t.world_rank(peer);
    os << (any ? "," : "") << (reqs[i].is_send ? " send to rank " : " receive from rank ") << world;
    if (world != peer) os << " (rank " << peer << " of a " << t.size() << "-rank sub-group)";
    any = true;
  }
  if (!any) os << " (nothing posted)";
  throw TimeoutError(os.str(), __FILE__, __LINE__);
}

}  // namespace detail

std::unique_ptr<SharedSegments> Transport::shared_memory(std::size_t) {
  HPCTRAIN_FAIL("the '" + name() + "' transport cannot share memory between ranks (needed by the "
                "shm and hierarchical all-reduce algorithms)");
}

std::string WaitPolicy::description() const {
  if (!what.empty()) return what;
  if (op == nullptr) return "collective";
  std::string d = std::string(op) + "(" + std::string(to_string(algorithm)) + ") #" + std::to_string(sequence);
  if (transport != nullptr) {
    d += " over " + transport->name() + " with " + std::to_string(transport->size()) + " ranks";
  }
  return d;
}

void wait_all(Transport& t, Request* reqs, std::size_t n, const WaitPolicy& policy) {
  if (detail::complete_all(t, reqs, n)) return;
  detail::SpinWait spin(policy);
  for (;;) {
    bool all = true;
    for (std::size_t i = 0; i < n; ++i) {
      if (!reqs[i].done() && !t.test(reqs[i])) all = false;
    }
    if (all) return;
    detail::block_until_any(t, reqs, n);
    if (spin.expired()) spin.fail(t, reqs, n);
  }
}

std::size_t wait_any(Transport& t, Request* reqs, std::size_t n, const WaitPolicy& policy) {
  detail::SpinWait spin(policy);
  bool any_pending = false;
  for (std::size_t i = 0; i < n; ++i) any_pending = any_pending || !reqs[i].done();
  HPCTRAIN_REQUIRE(any_pending, "wait_any: no pending request");
  if (std::size_t index = 0; detail::complete_any(t, reqs, n, index)) return index;
  for (;;) {
    for (std::size_t i = 0; i < n; ++i) {
      if (!reqs[i].done() && t.test(reqs[i])) return i;
    }
    detail::block_until_any(t, reqs, n);
    if (spin.expired()) spin.fail(t, reqs, n);
  }
}

}  // namespace hpctrain::coll
