#include "vendor_call_watchdog.hpp"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "hpctrain/base/error.hpp"

namespace hpctrain::coll::detail {

namespace {

using Clock = std::chrono::steady_clock;

struct WatchedCall {
  VendorCallInfo info;
  double timeout_s;
  Clock::time_point deadline;
};

std::string describe(const WatchedCall& c) {
  const VendorCallInfo& i = c.info;
  std::string s = std::string(i.operation) + " #" + std::to_string(i.sequence) + " (" + i.call;
  if (i.count > 0) s += " of " + std::to_string(i.count) + " " + std::string(to_string(i.type));
  s += ")";
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%g", c.timeout_s);
  const int me = world_rank();
  s += " did not complete within " + std::string(seconds) + " s (HPCTRAIN_COLL_TIMEOUT_S): still waiting for ";
  s += i.ranks == 2 ? "rank " + std::to_string(me == 0 ? 1 : 0)
                    : "one or more of the other " + std::to_string(i.ranks - 1) + " ranks (" + i.call +
                          " does not say which)";
  s += ", which stopped, failed or is in a different collective";
  return s;
}

/// The one watchdog thread of the process and the calls it watches.
class Watchdog {
 public:
  static Watchdog& instance() {
    static Watchdog w;
    return w;
  }
  std::uint64_t add(const VendorCallInfo& info, double timeout_s) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
    const auto timeout = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
    const std::uint64_t id = ++last_id_;
    calls_.emplace(id, WatchedCall{info, timeout_s, Clock::now() + timeout});
    cv_.notify_all();
    return id;
  }
  void remove(std::uint64_t id) noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    calls_.erase(id);
  }
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    if (!thread_.joinable()) return;
    // abort_job's std::exit on the watchdog thread (a process without MPI: loopback ranks, the
    // MPI-off build) runs this destructor on that same thread: it cannot join itself.
    if (thread_.get_id() == std::this_thread::get_id()) {
      thread_.detach();
    } else {
      thread_.join();
    }
  }

 private:
  Watchdog() = default;
  void run() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_) {
      if (calls_.empty()) {
        cv_.wait(lock);
        continue;
      }
      auto first = calls_.begin();
      for (auto it = calls_.begin(); it != calls_.end(); ++it)
        if (it->second.deadline < first->second.deadline) first = it;
      // A copy: wait_until takes the time point by reference and reads it again after waking,
      // when remove() may have erased the entry (a heap-use-after-free found by ASan).
      const Clock::time_point deadline = first->second.deadline;
      if (Clock::now() < deadline) {
        cv_.wait_until(lock, deadline);
        continue;
      }
      // The caller is blocked inside MPI and cannot throw: report and end the job from here.
      // Unlocked first: without MPI, abort_job ends in std::exit, whose static destructors
      // include ~Watchdog, which takes this lock (held here, it deadlocked: the process hung
      // instead of exiting).
      const TimeoutError error(describe(first->second), __FILE__, __LINE__);
      lock.unlock();
      abort_job(error, 1);
    }
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::map<std::uint64_t, WatchedCall> calls_;
  std::uint64_t last_id_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace

VendorCallWatch::VendorCallWatch(const VendorCallInfo& info, double timeout_s) {
  if (timeout_s > 0) id_ = Watchdog::instance().add(info, timeout_s);
}

VendorCallWatch::~VendorCallWatch() {
  if (id_ != 0) Watchdog::instance().remove(id_);
}

}  // namespace hpctrain::coll::detail
