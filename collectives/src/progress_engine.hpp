#pragma once
// Internal to hpctrain::collectives: the one background thread per Communicator that runs its
// non-blocking collectives in submission order, and the shared state behind a Work handle.

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include "hpctrain/collectives/communicator.hpp"

namespace hpctrain::coll {

/// What a Work handle and the progress thread share: done flag, error, start and end times.
struct Work::State {
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
  std::chrono::steady_clock::time_point started, finished;
};

/// One background thread that runs queued collectives in submission order. A task's exception
/// is stored in its Work::State and rethrown once by Work::wait().
class ProgressEngine {
 public:
  ProgressEngine();
  /// Runs what is queued, then joins the thread.
  ~ProgressEngine();
  ProgressEngine(const ProgressEngine&) = delete;
  ProgressEngine& operator=(const ProgressEngine&) = delete;

  /// Queues `task`; the returned state completes when it has run.
  std::shared_ptr<Work::State> submit(std::function<void()> task);

  /// Returns once everything submitted so far has run.
  void drain();

 private:
  void run();

  std::mutex mutex_;
  std::condition_variable cv_, idle_cv_;
  std::deque<std::pair<std::function<void()>, std::shared_ptr<Work::State>>> queue_;
  bool busy_ = false;
  bool stop_ = false;
  std::thread thread_;  // last: starts after the members above exist
};

}  // namespace hpctrain::coll
