#pragma once
/// @file
/// Background reading of a rank's batches for one epoch into a bounded queue.

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "hpctrain/io/dataset.hpp"
#include "hpctrain/io/epoch_plan.hpp"

namespace hpctrain::io {

/// One rank's share of one global batch, ready to copy into the model's input.
struct Batch {
  std::int64_t epoch = 0;
  std::int64_t global_batch_index = 0;
  /// B_b, the size of the whole global batch over all ranks (see EpochPlan::global_batch_size).
  std::int64_t global_batch_size = 0;
  /// Samples on this rank (may be 0 when the global batch is smaller than the rank count).
  std::size_t count = 0;
  /// count x sample_size floats, row-major (sample, then C, H, W), normalised. Empty when
  /// `resident` is set.
  std::vector<float> samples;
  /// Set where the source holds every sample in memory (SampleSource::resident): sample k of
  /// this batch is row sample_indices[k] of it, not copied into `samples` (the model's input
  /// gathers it: train::DeviceBatch::load).
  const float* resident = nullptr;
  std::vector<std::int32_t> labels;
  /// The global index in the data set of each sample, in the order above.
  std::vector<std::int64_t> sample_indices;
};

/// Reads this rank's share (`plan.rank_indices`) of the given global batch.
Batch read_batch(const SampleSource& reader, const EpochPlan& plan, std::int64_t epoch,
                 std::int64_t batch);

/// Reads batches [start_batch, plan.batches_per_epoch()) of `epoch` on a background thread,
/// at most `depth` batches ahead of the consumer; depth 0 reads each batch in next(), on the
/// caller's thread (for a source in memory, where a copy costs less than handing a batch
/// between threads that share a core).
///
/// Memory: the queue never holds more than `depth` batches, and the thread starts reading a
/// batch only when there is room for it, so at most depth + 1 batches exist at once (the queue
/// plus the one the consumer holds): a data set larger than memory streams.
/// The thread makes HDF5 calls only through DatasetReader::read, which holds h5_mutex(); it
/// makes no MPI calls. `reader` must outlive the Prefetcher. An error in the thread is
/// rethrown by next() after the batches read before it.
class Prefetcher {
 public:
  Prefetcher(const SampleSource& reader, EpochPlan plan, std::int64_t epoch,
             std::int64_t start_batch = 0, std::size_t depth = 2);
  /// Stops the thread (after the batch it is reading) and joins it.
  ~Prefetcher();
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  /// The next batch in order; std::nullopt after the epoch's last batch. Blocks while the
  /// thread reads.
  std::optional<Batch> next();

  std::size_t depth() const noexcept { return depth_; }
  /// The most batches the queue has held at once (for tests of the memory bound).
  std::size_t max_queued() const;

 private:
  void run() noexcept;

  const SampleSource& reader_;
  EpochPlan plan_;
  std::int64_t epoch_;
  std::int64_t start_batch_;
  std::size_t depth_;
  std::int64_t next_batch_;  ///< depth 0: the batch next() reads

  mutable std::mutex mutex_;
  std::condition_variable room_;   // signalled when the consumer takes a batch or stop is set
  std::condition_variable ready_;  // signalled when a batch is queued or the thread ends
  std::deque<Batch> queue_;
  std::size_t max_queued_ = 0;
  bool stop_ = false;
  bool finished_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace hpctrain::io
