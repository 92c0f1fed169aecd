#pragma once
// What a training run tells its user: the start lines, the progress line every --log-every
// steps, the evaluation line, the closing lines (stdout, rank 0, unless --quiet) and the same
// as JSON lines in --metrics and as TensorBoard scalars in --tensorboard (rank 0). Scripts and tests parse these lines: keep them stable.

#include <chrono>
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>

#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/io/tfevents_writer.hpp"
#include "hpctrain/train/trainer.hpp"

namespace hpctrain::train {

using Clock = std::chrono::steady_clock;

/// Where a rank's time went, in seconds.
struct TimeTotals {
  double compute_s = 0.0;
  double comm_exposed_s = 0.0;
  double data_wait_s = 0.0;
};

/// What the start lines describe.
struct RunDescription {
  std::int64_t parameters = 0;
  std::int64_t data_samples = 0;
  std::int64_t total_steps = 0;
  std::int64_t steps_per_epoch = 0;
  std::size_t gradient_buckets = 0;
  int blas_threads = 0;    ///< deterministic mode's BLAS thread count (-1: not OpenBLAS)
  int kernel_threads = 0;  ///< deterministic mode's thread count of the thread-independent kernels
  bool data_in_memory = false;  ///< the training split was copied into memory
  /// Deterministic mode runs this model's passes with oneDNN held at one thread (its layers are
  /// not all grouped-pass layers: batch norm, attention), however many threads the rank has.
  bool library_bound_passes = false;
};

class ProgressReport {
 public:
  /// Opens --metrics on rank 0 (throws naming the file when it cannot).
  ProgressReport(const TrainOptions& options, coll::Communicator& comm, const LrSchedule& schedule,
                 std::int64_t total_steps);

  void print_start(const RunDescription& run) const;
  /// After optimiser step `step` (counted from 1) of `epoch` (from 0): `loss_share` is this
  /// rank's share of the step's mean loss, `samples` the step's samples over all ranks.
  /// Collective on the steps that print a progress line (every --log-every, and the last).
  void after_step(std::int64_t step, std::int64_t epoch, double loss_share, std::int64_t samples,
                  Clock::time_point step_end, const TimeTotals& times);
  /// Optimiser step `step` (from 1) of `epoch` was skipped, the `skipped`-th time, for `cause`
  /// (a non-finite loss or gradient): a warning on rank 0's stderr (even with --quiet), a
  /// `skipped_step` record in --metrics, a TensorBoard scalar.
  void after_skipped_step(std::int64_t step, std::int64_t epoch, const std::string& cause, std::int64_t skipped);
  void after_eval(std::int64_t step, std::int64_t epoch, const EvalResult& eval);
  /// The `done` and checksum lines and the metrics summary.
  void print_summary(const TrainResult& result);
  /// Mean training loss of the last progress window.
  double last_train_loss() const noexcept { return last_loss_; }

 private:
  const TrainOptions& options_;
  coll::Communicator& comm_;
  const LrSchedule& schedule_;
  std::int64_t total_steps_;
  bool chatty_;
  std::ofstream metrics_;
  std::unique_ptr<io::TfEventsWriter> tensorboard_;  ///< rank 0 with --tensorboard
  double window_loss_ = 0.0;
  std::int64_t window_steps_ = 0, window_samples_ = 0;
  Clock::time_point window_start_ = Clock::now();
  double last_loss_ = 0.0;
};

/// Samples per second after the warm-up steps, evaluation time excluded, the slowest rank's.
class ThroughputMeter {
 public:
  ThroughputMeter(std::int64_t first_step, std::int64_t warmup_steps)
      : first_step_(first_step), warmup_steps_(warmup_steps) {}
  void after_step(std::int64_t step, std::int64_t samples, Clock::time_point step_end);
  /// Evaluation is not training: its seconds after the warm-up are kept out of the rate.
  void exclude(std::int64_t step, double seconds);
  /// Collective: samples/s from the warm-up's end to `end` on the slowest rank (0 if none).
  double samples_per_s(coll::Communicator& comm, Clock::time_point end) const;

 private:
  std::int64_t first_step_, warmup_steps_;
  Clock::time_point start_{};
  std::int64_t samples_ = 0;
  double excluded_s_ = 0.0;
};

}  // namespace hpctrain::train
