// The progress engine and Work handles (progress_engine.hpp).

#include "progress_engine.hpp"

#include "hpctrain/base/error.hpp"

namespace hpctrain::coll {

std::chrono::steady_clock::time_point Work::started_at() const {
  if (!state_) return {};
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->started;
}

std::chrono::steady_clock::time_point Work::finished_at() const {
  if (!state_) return {};
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->finished;
}

void Work::wait() {
  HPCTRAIN_REQUIRE(state_, "Work::wait on an empty Work handle");
  std::unique_lock<std::mutex> lock(state_->mutex);
  state_->cv.wait(lock, [&] { return state_->done; });
  if (state_->error) {
    auto e = state_->error;
    state_->error = nullptr;  // report once
    std::rethrow_exception(e);
  }
}

bool Work::test() const {
  if (!state_) return true;
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->done;
}

ProgressEngine::ProgressEngine() : thread_([this] { run(); }) {}

ProgressEngine::~ProgressEngine() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::shared_ptr<Work::State> ProgressEngine::submit(std::function<void()> task) {
  auto state = std::make_shared<Work::State>();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.emplace_back(std::move(task), state);
  }
  cv_.notify_all();
  return state;
}

void ProgressEngine::drain() {
  std::unique_lock<std::mutex> lock(mutex_);
  idle_cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
}

void ProgressEngine::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop requested and nothing left
    auto [task, state] = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    std::exception_ptr error;
    {
      std::lock_guard<std::mutex> state_lock(state->mutex);
      state->started = std::chrono::steady_clock::now();
    }
    try {
      task();
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> state_lock(state->mutex);
      state->done = true;
      state->error = error;
      state->finished = std::chrono::steady_clock::now();
    }
    state->cv.notify_all();
    lock.lock();
    busy_ = false;
    idle_cv_.notify_all();
  }
}

}  // namespace hpctrain::coll
