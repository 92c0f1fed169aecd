#include "hpctrain/io/prefetcher.hpp"

#include <utility>

#include <fmt/format.h>

namespace hpctrain::io {

Batch read_batch(const SampleSource& reader, const EpochPlan& plan, std::int64_t epoch,
                 std::int64_t batch) {
  HPCTRAIN_REQUIRE(plan.count() == reader.info().count,
                   fmt::format("data set '{}': the epoch plan is for {} samples but the file "
                               "holds {}",
                               reader.info().path, plan.count(), reader.info().count));
  Batch b;
  b.epoch = epoch;
  b.global_batch_index = batch;
  b.global_batch_size = plan.global_batch_size(batch);
  b.sample_indices = plan.rank_indices(epoch, batch);
  b.count = b.sample_indices.size();
  if (const auto resident = reader.resident()) {
    reader.read_labels(b.sample_indices, b.labels);
    b.resident = resident->samples;
    return b;
  }
  reader.read(b.sample_indices, b.samples, b.labels);
  return b;
}

Prefetcher::Prefetcher(const SampleSource& reader, EpochPlan plan, std::int64_t epoch,
                       std::int64_t start_batch, std::size_t depth)
    : reader_(reader),
      plan_(std::move(plan)),
      epoch_(epoch),
      start_batch_(start_batch),
      depth_(depth),
      next_batch_(start_batch) {
  HPCTRAIN_REQUIRE(epoch_ >= 0, fmt::format("Prefetcher: epoch {} is negative", epoch_));
  HPCTRAIN_REQUIRE(start_batch_ >= 0 && start_batch_ <= plan_.batches_per_epoch(),
                   fmt::format("Prefetcher: start batch {} is not in [0, {}]", start_batch_,
                               plan_.batches_per_epoch()));
  HPCTRAIN_REQUIRE(plan_.count() == reader_.info().count,
                   fmt::format("data set '{}': the epoch plan is for {} samples but the file "
                               "holds {}",
                               reader_.info().path, plan_.count(), reader_.info().count));
  if (depth_ > 0) thread_ = std::thread([this] { run(); });
}

Prefetcher::~Prefetcher() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  room_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Prefetcher::run() noexcept {
  try {
    const std::int64_t end = plan_.batches_per_epoch();
    for (std::int64_t b = start_batch_; b < end; ++b) {
      {
        // Wait for room before reading, so queued + being-read never exceeds depth.
        std::unique_lock<std::mutex> lock(mutex_);
        room_.wait(lock, [this] { return stop_ || queue_.size() < depth_; });
        if (stop_) break;
      }
      Batch batch = read_batch(reader_, plan_, epoch_, b);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        queue_.push_back(std::move(batch));
        max_queued_ = std::max(max_queued_, queue_.size());
      }
      ready_.notify_one();
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = std::current_exception();
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    finished_ = true;
  }
  ready_.notify_all();
}

std::optional<Batch> Prefetcher::next() {
  if (depth_ == 0) {  // synchronous: read on the caller's thread
    if (next_batch_ >= plan_.batches_per_epoch()) return std::nullopt;
    return read_batch(reader_, plan_, epoch_, next_batch_++);
  }
  std::unique_lock<std::mutex> lock(mutex_);
  ready_.wait(lock, [this] { return !queue_.empty() || finished_; });
  if (!queue_.empty()) {
    Batch b = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    room_.notify_one();
    return b;
  }
  if (error_) std::rethrow_exception(error_);
  return std::nullopt;
}

std::size_t Prefetcher::max_queued() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return max_queued_;
}

}  // namespace hpctrain::io
