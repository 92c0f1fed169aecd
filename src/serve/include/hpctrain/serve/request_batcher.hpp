#pragma once
/// @file
/// RequestBatcher: the queue between the HTTP handlers and the ranks' forward passes, and the
/// dynamic batching rule.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace hpctrain::serve {

/// One POST /v1/predict on its way through the server. The handler fills `instances` and
/// `rows`, submits it and waits on `done`; the rank that ran it fills the results (or `error`).
struct PendingRequest {
  std::vector<float> instances;  ///< rows x input_size raw values
  std::int64_t rows = 0;
  std::vector<float> probabilities;      ///< rows x classes
  std::vector<std::int32_t> predictions;  ///< rows
  std::int64_t model_step = 0;
  std::string error;  ///< non-empty: the forward pass failed (answered 500)
  std::chrono::steady_clock::time_point queued;
  std::promise<void> done;
};

using RequestBatch = std::vector<std::shared_ptr<PendingRequest>>;

/// Batching rule: a rank that is free takes the queued requests in arrival order while their
/// instances fit in `max_batch` (a single larger request goes alone). If the batch is not full
/// and other requests are still being parsed (announce() without submit()/withdraw()), it waits
/// for them, at most until `max_wait` after the oldest request was queued; otherwise it runs at
/// once, so an idle server adds no wait. Takers are preferred (rank 0's own model: no message
/// round trip) or not (other ranks): a non-preferred taker leaves the queue to a preferred one
/// that is waiting, so a lightly loaded server answers from rank 0 and the other ranks take
/// batches only while rank 0 is busy. Thread-safe.
class RequestBatcher {
 public:
  RequestBatcher(std::int64_t max_batch, std::chrono::microseconds max_wait);

  /// A handler started parsing a request (it will submit() or withdraw()).
  void announce();
  /// A parsed request joins the queue (ends its announce()).
  void submit(std::shared_ptr<PendingRequest> request);
  /// A request that will not be submitted (bad input; ends its announce()).
  void withdraw();
  /// Blocks until a batch is ready (see the rule); empty once close() was called and the queue
  /// has been drained.
  RequestBatch next_batch(bool preferred = true);
  /// No more requests: next_batch() drains what is queued, then returns empty batches.
  void close();

 private:

  const std::int64_t max_batch_;
  const std::chrono::microseconds max_wait_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::shared_ptr<PendingRequest>> queue_;
  std::int64_t parsing_ = 0;
  std::int64_t preferred_waiting_ = 0;  ///< preferred takers blocked in next_batch
  bool closed_ = false;
};

}  // namespace hpctrain::serve
