#include "hpctrain/serve/request_batcher.hpp"

namespace hpctrain::serve {

RequestBatcher::RequestBatcher(std::int64_t max_batch, std::chrono::microseconds max_wait)
    : max_batch_(max_batch < 1 ? 1 : max_batch), max_wait_(max_wait) {}

void RequestBatcher::announce() {
  const std::lock_guard<std::mutex> lock(mutex_);
  ++parsing_;
}

void RequestBatcher::submit(std::shared_ptr<PendingRequest> request) {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    --parsing_;
    request->queued = std::chrono::steady_clock::now();
    queue_.push_back(std::move(request));
  }
  changed_.notify_all();
}

void RequestBatcher::withdraw() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    --parsing_;
  }
  changed_.notify_all();
}

void RequestBatcher::close() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
  }
  changed_.notify_all();
}

RequestBatch RequestBatcher::next_batch(bool preferred) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (preferred) {
    ++preferred_waiting_;
    changed_.wait(lock, [&] { return !queue_.empty() || closed_; });
    --preferred_waiting_;
  } else {
    changed_.wait(lock, [&] { return (!queue_.empty() && preferred_waiting_ == 0) || closed_; });
  }
  RequestBatch batch;
  if (queue_.empty()) return batch;  // closed and drained
  const auto deadline = queue_.front()->queued + max_wait_;
  std::int64_t rows = 0;
  for (;;) {
    while (!queue_.empty() && (batch.empty() || rows + queue_.front()->rows <= max_batch_)) {
      rows += queue_.front()->rows;
      batch.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    const bool full = rows >= max_batch_ || !queue_.empty();  // the next request does not fit
    if (full || parsing_ == 0 || closed_ || std::chrono::steady_clock::now() >= deadline) {
      if (!queue_.empty()) changed_.notify_all();  // what is left is another taker's
      return batch;
    }
    changed_.wait_until(lock, deadline);
  }
}

}  // namespace hpctrain::serve
