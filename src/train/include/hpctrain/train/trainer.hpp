#pragma once
/// @file
/// run_training: the whole training run behind `hpctrain train`. Sharded data (io::EpochPlan),
/// a gradient strategy (GradientSync: bucketed all-reduce, or the fixed-tree sum with
/// --deterministic), optimiser and LR schedule, evaluation, checkpoints and preemption,
/// progress lines, JSONL metrics and the timeline.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/train/data_parallel.hpp"
#include "hpctrain/train/evaluation.hpp"
#include "hpctrain/train/lr_schedule.hpp"

namespace hpctrain::train {

struct TrainOptions {
  nlohmann::json model = {{"name", "mlp"}};  ///< model config (registry)
  std::string data;        ///< training data set (HDF5, hpctrain format)
  std::string eval_data;   ///< test split; empty = no evaluation
  std::int64_t epochs = 1;
  std::int64_t max_steps = 0;  ///< 0 = no limit; otherwise stop after this many optimiser steps
  /// Samples per micro-batch over ALL ranks (io::EpochPlan splits it). Every sample's loss is
  /// divided by the samples of the whole optimiser step (global_batch x accumulate, less at an
  /// epoch's end) and the ranks' gradients are summed (GradientSync's contract).
  std::int64_t global_batch = 128;
  std::int64_t accumulate = 1;  ///< micro-batches (of global_batch each) per optimiser step
  bool drop_last = true;
  /// Shuffle the epoch in blocks of this many consecutive samples (io::EpochPlan); 1 = sample by sample.
  std::int64_t shuffle_block = 1;
  std::uint64_t seed = 42;
  std::string optimizer = "sgd";  ///< sgd | adamw
  double lr = 0.05;
  double momentum = 0.9;
  bool nesterov = false;
  double weight_decay = 0.0;
  double clip_norm = 0.0;  ///< 0 = no clipping
  /// Optimiser steps whose loss or summed gradient is NaN or infinite that the run skips (the
  /// update is not applied; counted in TrainResult::skipped_steps) before one more stops it.
  std::int64_t skip_nonfinite_steps = 0;
  LrSchedule schedule;      ///< base_lr is set from lr (after scaling)
  LrScaling lr_scaling = LrScaling::none;
  std::int64_t lr_reference_batch = 128;
  DataParallelOptions parallel;
  /// ddp (replicated; bucketed all-reduce) | zero1 (optimiser state sharded over the ranks;
  /// reduce-scatter, all-gather) | zero2 (gradients kept as the shard too). zero_sync.hpp.
  std::string strategy = "ddp";
  /// Gradients on the wire: f32 | bf16 | f16 (16 bits, f32 additions inside the reduction, f32
  /// master weights). Not with --deterministic (its sum is exact integer fixed point).
  std::string grad_dtype = "f32";
  /// With a 16-bit grad_dtype: keep each rank's rounding error and add it to the next cast
  /// (DataParallelOptions::error_feedback). Not checkpointed: a resumed run starts from zero.
  bool grad_error_feedback = false;
  float normalize_mean = 0.2860f;  ///< Fashion-MNIST training-set mean
  float normalize_std = 0.3530f;
  std::size_t prefetch_depth = 4;
  /// The training split is copied into memory (io/in_memory_dataset.hpp) when its samples take
  /// at most this many MiB per rank (as floats); 0: always stream from the file. Same bits
  /// either way.
  std::size_t data_in_memory_mib = 1024;
  std::int64_t log_every = 50;  ///< progress line every N steps (0 = only per epoch)
  std::string metrics_path;     ///< JSONL, rank 0
  std::string timeline_path;    ///< Chrome-trace JSON, all ranks' spans gathered to rank 0
  /// TensorBoard event file directory (rank 0; io/tfevents_writer.hpp): the --metrics values as
  /// scalars train/loss, train/lr, train/samples_per_s, time/compute_s, time/exposed_comm_s,
  /// eval/loss, eval/accuracy. Empty = none.
  std::string tensorboard_dir;
  std::int64_t timeline_steps = 20;  ///< spans of the first N steps only (files stay small)
  std::int64_t warmup_steps_for_throughput = 5;  ///< excluded from samples/s
  /// Bitwise-identical results at any rank count and across resumes at another rank count
  /// (docs/deterministic.md): the global batch is cut into micro-shards of `micro_shard`
  /// samples, each run forward/backward on its own, their gradients summed in float over
  /// a fixed binary tree on the micro-shard index (coll::TreeSum); BLAS runs with one thread; evaluation sums are exact.
  bool deterministic = false;
  std::int64_t micro_shard = 16;  ///< samples per micro-shard (deterministic mode)
  /// Batch norm normalises with the statistics of the global batch (one f64 all-reduce per
  /// batch-norm layer in forward and one in backward) instead of each rank's samples. Needs a
  /// model with batch norm; not with --deterministic (there each micro-shard normalises with its
  /// own statistics, which is what keeps the bytes independent of P).
  bool sync_bn = false;
  bool quiet = false;
  bool keep_parameters = false;  ///< return the final parameters in TrainResult (tests)
  /// Called on every rank at the end of each epoch (after its evaluation; `eval.samples == 0`
  /// without eval data) with the epoch counted from 0; returning false ends the run there
  /// (TrainResult::stopped_early), as a sweep scheduler's "stop" does. It may run collectives
  /// on the run's communicator and must return the same on every rank. Empty: every epoch runs.
  std::function<bool(std::int64_t epoch, const EvalResult& eval)> after_epoch;
  /// A run resumed at an epoch boundary first evaluates the parameters it loaded (an eval
  /// record for the checkpoint's epoch; a PBT child's starting point). Needs eval data.
  bool evaluate_resumed = false;
  /// Append to metrics_path instead of rewriting it (a sweep trial continued from its own
  /// checkpoint after `hpctrain sweep --resume` keeps the records of its earlier run).
  bool append_metrics = false;

  // Checkpoints (io/checkpoint.hpp) and preemption (preemption.hpp).
  std::string checkpoint_dir;          ///< empty = no checkpoints, no preemption handling
  std::int64_t checkpoint_every = 0;   ///< every N optimiser steps (0 = off)
  double checkpoint_every_s = 0.0;     ///< and/or every T seconds (0 = off)
  int keep = 3;                        ///< newest checkpoints kept
  std::string resume = "none";         ///< none | auto (newest valid in checkpoint_dir) | a step directory
  /// A run that does not resume refuses a checkpoint_dir holding committed steps; with this
  /// set it removes them first.
  bool overwrite_checkpoints = false;
};

/// What one rank holds (the largest over the ranks), in bytes.
struct MemoryUse {
  std::uint64_t optimizer_state_bytes = 0;  ///< the optimiser's state buffers (sharded under ZeRO)
  std::uint64_t gradient_bytes = 0;         ///< gradient buffers (model's and the strategy's)
  std::uint64_t parameter_bytes = 0;        ///< parameter buffers (model's and the strategy's copies)
  std::uint64_t peak_rss_bytes = 0;         ///< getrusage ru_maxrss of the process
};

struct TrainResult {
  std::int64_t steps = 0;
  std::int64_t epochs_completed = 0;
  double final_train_loss = 0.0;
  EvalResult eval;  ///< after the last epoch (samples == 0 without eval data)
  double samples_per_s = 0.0;  ///< after warm-up, over all ranks, evaluation time excluded
  double seconds = 0.0;
  double compute_s = 0.0, comm_exposed_s = 0.0, data_wait_s = 0.0;  ///< rank-0 totals
  std::uint64_t parameter_checksum = 0;  ///< XXH3-64 of the final parameter buffer
  std::int64_t parameter_count = 0;
  /// Whether some bucket's all-reduce started before backward ended (timeline evidence).
  bool overlap_observed = false;
  /// Under zero1/zero2: some rank's forward computed a layer while a later layer's parameter
  /// all-gather was still in flight.
  bool gather_overlap_observed = false;
  std::vector<float> parameters;  ///< final parameters when TrainOptions::keep_parameters
  std::string resumed_from;       ///< step directory the run started from ("" = fresh)
  std::int64_t checkpoints_written = 0;
  std::int64_t skipped_steps = 0;  ///< non-finite steps skipped (TrainOptions::skip_nonfinite_steps)
  bool preempted = false;  ///< stopped on SIGUSR1/SIGTERM after checkpointing (exit kExitRequeue)
  bool stopped_early = false;  ///< TrainOptions::after_epoch returned false
  MemoryUse memory;        ///< max over ranks (the --metrics summary's *_bytes)
};

/// The strategy names --strategy accepts ("ddp, zero1, zero2").
std::string strategy_names();

/// Trains on `comm` (every rank calls it with the same options; collective throughout). Prints
/// on rank 0 unless `quiet` (progress_report.cpp holds the lines scripts parse). Throws
/// hpctrain::Error on bad input (file, flag or value named).
TrainResult run_training(const TrainOptions& options, coll::Communicator& comm);

/// XXH3-64 of the parameters as stored (bitwise identity check between runs).
std::uint64_t parameter_checksum(const float* data, std::size_t count);

}  // namespace hpctrain::train
