#include "hpctrain/train/trainer.hpp"

#include <Kokkos_Core.hpp>
#include <sys/resource.h>
#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "checkpoint_policy.hpp"
#include "hpctrain/base/error.hpp"
#include "hpctrain/collectives/device_memory.hpp"
#include "hpctrain/core/environment.hpp"
#include "hpctrain/core/optimizer.hpp"
#include "hpctrain/core/tensor.hpp"
#include "hpctrain/io/checkpoint_lock.hpp"
#include "hpctrain/io/dataset.hpp"
#include "hpctrain/io/epoch_plan.hpp"
#include "hpctrain/io/in_memory_dataset.hpp"
#include "hpctrain/io/prefetcher.hpp"
#include "hpctrain/io/system_memory.hpp"
#include "hpctrain/models/registry.hpp"
#include "hpctrain/train/bucketed_allreduce_sync.hpp"
#include "hpctrain/train/deterministic_sync.hpp"
#include "hpctrain/train/finite_guard.hpp"
#include "hpctrain/train/gradient_sync.hpp"
#include "hpctrain/train/memory_check.hpp"
#include "hpctrain/train/output_checks.hpp"
#include "hpctrain/train/zero_sync.hpp"
#include "progress_report.hpp"

namespace hpctrain::train {

namespace {

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

/// --strategy, --grad-dtype and the combinations they cannot run with.
void validate_strategy(const TrainOptions& o) {
  const bool zero = o.strategy == "zero1" || o.strategy == "zero2";
  HPCTRAIN_REQUIRE(zero || o.strategy == "ddp",
                   "--strategy: unknown strategy '" + o.strategy + "' (expected one of: " + strategy_names() + ")");
  HPCTRAIN_REQUIRE(o.grad_dtype == "f32" || o.grad_dtype == "bf16" || o.grad_dtype == "f16",
                   "--grad-dtype: unknown type '" + o.grad_dtype + "' (expected f32, bf16 or f16)");
  HPCTRAIN_REQUIRE(o.grad_dtype == "f32" || !o.deterministic,
                   "--grad-dtype " + o.grad_dtype + " cannot be combined with --deterministic: its tree sum adds "
                   "f32 gradients, and a 16-bit gradient would change the bytes (use --grad-dtype f32)");
  HPCTRAIN_REQUIRE(!o.grad_error_feedback || o.grad_dtype != "f32",
                   "--grad-error-feedback needs --grad-dtype bf16 or f16: f32 gradients are sent unrounded, so "
                   "there is no rounding error to feed back");
  HPCTRAIN_REQUIRE(!(o.strategy == "zero2" && o.deterministic),
                   "--strategy zero2 cannot run with --deterministic: the tree sum keeps every micro-shard's whole "
                   "gradient, so there is no gradient shard to keep (use --strategy zero1, whose bytes equal ddp's)");
  const coll::Algorithm a = o.parallel.algorithm;
  const bool scatter_gather_algo = a == coll::Algorithm::automatic || a == coll::Algorithm::ring ||
                                   a == coll::Algorithm::rabenseifner || a == coll::Algorithm::shm ||
                                   a == coll::Algorithm::hierarchical;
  HPCTRAIN_REQUIRE(!zero || o.deterministic || scatter_gather_algo,
                   "--algo " + std::string(coll::to_string(a)) + " cannot be used with --strategy " + o.strategy +
                       ": " + o.strategy + " reduce-scatters gradients and all-gathers parameters, which have no " +
                       std::string(coll::to_string(a)) + " algorithm (use auto, ring, rabenseifner, shm or hierarchical)");
}

coll::DataType wire_type(const std::string& grad_dtype) {
  if (grad_dtype == "bf16") return coll::DataType::bf16;
  if (grad_dtype == "f16") return coll::DataType::f16;
  return coll::DataType::f32;
}

void validate(const TrainOptions& o) {
  validate_numeric_options(o);
  HPCTRAIN_REQUIRE(!o.data.empty(), "--data: no training data set given");
  HPCTRAIN_REQUIRE(o.global_batch >= 1, "--global-batch must be at least 1, got " + std::to_string(o.global_batch));
  HPCTRAIN_REQUIRE(o.epochs >= 1, "--epochs must be at least 1, got " + std::to_string(o.epochs));
  HPCTRAIN_REQUIRE(o.max_steps >= 0, "--max-steps must be non-negative");
  HPCTRAIN_REQUIRE(o.accumulate >= 1, "--accumulate must be at least 1, got " + std::to_string(o.accumulate));
  HPCTRAIN_REQUIRE(o.lr > 0 && std::isfinite(o.lr), "--lr must be a positive number");
  HPCTRAIN_REQUIRE(o.momentum >= 0 && o.momentum < 1, "--momentum must lie in [0, 1)");
  HPCTRAIN_REQUIRE(o.weight_decay >= 0, "--weight-decay must be non-negative");
  HPCTRAIN_REQUIRE(o.clip_norm >= 0, "--clip-norm must be non-negative (0 disables clipping)");
  HPCTRAIN_REQUIRE(o.optimizer == "sgd" || o.optimizer == "adamw",
                   "--optimizer: unknown optimiser '" + o.optimizer + "' (expected sgd or adamw)");
  HPCTRAIN_REQUIRE(o.prefetch_depth >= 1, "--prefetch must be at least 1, got " + std::to_string(o.prefetch_depth));
  HPCTRAIN_REQUIRE(o.micro_shard >= 1, "--micro-shard must be at least 1, got " + std::to_string(o.micro_shard));
  validate_strategy(o);
  HPCTRAIN_REQUIRE(!(o.sync_bn && o.deterministic),
                   "--sync-bn cannot be combined with --deterministic: there each micro-shard normalises with its "
                   "own statistics, which keeps the bytes independent of the rank count (docs/models.md)");
}

std::unique_ptr<core::Optimizer<float>> make_optimizer(const TrainOptions& o, double lr) {
  if (o.optimizer == "adamw") {
    core::AdamWOptions a;
    a.lr = lr;
    a.weight_decay = o.weight_decay;
    return std::make_unique<core::AdamW<float>>(a);
  }
  core::SgdOptions s;
  s.lr = lr;
  s.momentum = o.momentum;
  s.nesterov = o.nesterov;
  s.weight_decay = o.weight_decay;
  return std::make_unique<core::Sgd<float>>(s);
}

/// --sync-bn: the reducer set on the model's batch-norm layers.
void configure_batch_statistics(const TrainOptions& o, coll::Communicator& comm, models::Sequential<float>& model) {
  if (!o.sync_bn) return;
  HPCTRAIN_REQUIRE(model.has_state(),
                   "--sync-bn: model '" + o.model.value("name", std::string("?")) + "' has no batch normalisation");
  model.set_stat_reducer(
      [&comm](double* values, std::size_t count) { comm.allreduce(values, count, coll::ReduceOp::sum); });
}

std::unique_ptr<GradientSync> make_gradient_sync(const TrainOptions& o, coll::Communicator& comm,
                                                 models::Sequential<float>& model, Timeline& timeline) {
  configure_batch_statistics(o, comm, model);
  DataParallelOptions parallel = o.parallel;
  parallel.wire_type = wire_type(o.grad_dtype);
  parallel.error_feedback = o.grad_error_feedback;
  if (o.strategy != "ddp") {
    const ZeroOptions zero{o.strategy == "zero2" ? 2 : 1, parallel, o.deterministic, o.micro_shard};
    return std::make_unique<ZeroSync>(comm, model, zero, &timeline);
  }
  if (o.deterministic) {
    return std::make_unique<DeterministicSync>(comm, model, o.micro_shard, &timeline, parallel);
  }
#if defined(KOKKOS_ENABLE_CUDA) && defined(HPCTRAIN_HAVE_CUDA_COLLECTIVES)
  // CUDA gradients: the buckets' device all-reduce stages through this rank's GPU (every
  // algorithm but nccl, which needs no DeviceMemory).
  comm.set_device_memory(coll::make_cuda_device_memory(Kokkos::Cuda().cuda_device(), coll::mpi_transport_cuda_aware()));
#endif
  return std::make_unique<BucketedAllreduceSync>(comm, model, parallel, &timeline);
}


/// The model `o.model` describes, checked against the data sets' sample shape and classes, not
/// yet finalised (models::plan_model): its parameters are allocated after the memory check.
std::unique_ptr<models::Sequential<float>> plan_checked_model(const TrainOptions& o, const io::DatasetReader& train,
                                                              const std::optional<io::DatasetReader>& eval) {
  auto model = models::plan_model<float>(o.model);
  const auto classes = static_cast<std::int32_t>(model->output_shape().back());
  train.require_compatible(model->input_shape(), classes);
  if (eval) eval->require_compatible(model->input_shape(), classes);
  return model;
}

/// Whether to copy the training split into memory: when its samples take at most
/// --data-in-memory-mib per rank and, with the run's other memory, the node's ranks would use at
/// most half of what the node (or cgroup) has available; otherwise it streams from the file.
/// Either way the values, and so the results, are the same.
bool training_split_fits_in_memory(const TrainOptions& o, const io::DatasetInfo& data, const MemoryEstimate& memory,
                                   int ranks_on_node) {
  const std::uint64_t bytes = io::InMemoryDataset::bytes_needed(data);
  if (bytes > (static_cast<std::uint64_t>(o.data_in_memory_mib) << 20)) return false;
  const io::AvailableMemory available = io::available_memory();
  if (!available.known()) return true;
  return (memory.total() + bytes) * static_cast<std::uint64_t>(std::max(ranks_on_node, 1)) <= available.bytes / 2;
}

/// Optimiser steps of the run: ceil(batches per epoch / accumulate) per epoch, capped by --max-steps.
std::int64_t count_total_steps(const TrainOptions& o, const io::EpochPlan& plan) {
  const std::int64_t batches = plan.batches_per_epoch();
  HPCTRAIN_REQUIRE(batches > 0, "--global-batch " + std::to_string(o.global_batch) + " is larger than the " +
                                    std::to_string(plan.count()) + " samples of '" + o.data +
                                    "' with drop-last on: no full batch");
  const std::int64_t total = (batches + o.accumulate - 1) / o.accumulate * o.epochs;
  return o.max_steps > 0 ? std::min(total, o.max_steps) : total;
}

/// The micro-batches' copies into the model's memory, one ahead: the next micro-batch's copy
/// starts before this one's forward and backward are queued, on a stream of its own in a GPU
/// build (DeviceBatch::start_load_rows), so it overlaps them. In a host build these are the same
/// copies in the same order, one micro-batch earlier. Two buffers take turns.
class BatchesAhead {
 public:
  explicit BatchesAhead(core::Shape sample_shape) : shape_(std::move(sample_shape)) {}

  /// The next micro-batch: the one start_next() started, or `fetch()`'s, copied now.
  template <class Fetch>
  io::Batch take(const Fetch& fetch) {
    std::optional<io::Batch> batch = std::exchange(ahead_, std::nullopt);
    if (batch) {
      current_ = 1 - current_;
    } else {
      batch = fetch();
      start(current_, *batch);
    }
    buffers_[current_].wait();
    return std::move(*batch);
  }
  /// take()'s micro-batch in the model's memory.
  const DeviceBatch& current() const { return buffers_[current_]; }
  /// Starts copying `fetch()`'s micro-batch, the one after current(), into the other buffer.
  template <class Fetch>
  void start_next(const Fetch& fetch) {
    ahead_ = fetch();
    start(1 - current_, *ahead_);
  }

 private:
  void start(int buffer, const io::Batch& b) {
    Kokkos::fence();  // the kernels that read this buffer's previous micro-batch have run
    buffers_[buffer].start_load_rows(b, 0, b.count, shape_);
  }

  core::Shape shape_;
  DeviceBatch buffers_[2];
  int current_ = 0;
  std::optional<io::Batch> ahead_;
};

/// The epochs and steps of one run, on parts built by run_training.
struct TrainingLoop {
  const TrainOptions& o;
  coll::Communicator& comm;
  const io::SampleSource& reader;
  std::size_t prefetch_depth;  ///< 0 (read in the loop) when the data is in memory
  const std::optional<io::DatasetReader>& eval_reader;
  models::Sequential<float>& model;
  const io::EpochPlan& plan;
  GradientSync& sync;
  core::Optimizer<float>& optimizer;
  const LrSchedule& schedule;
  Timeline& timeline;
  CheckpointPolicy& checkpoints;
  ProgressReport& report;
  std::int64_t step;  ///< optimiser steps taken
  ThroughputMeter throughput;
  TimeTotals times;
  TrainResult result;
  std::optional<BatchesAhead> ahead;  ///< the micro-batches' copies, per epoch

  void run(const ResumePoint& start) {
    if (o.evaluate_resumed && eval_reader && !start.path.empty() && start.epoch > 0 && start.next_batch == 0) {
      evaluate_epoch(start.epoch - 1);
    }
    for (std::int64_t epoch = start.epoch; epoch < o.epochs && step < schedule.total_steps; ++epoch) {
      std::int64_t batch = epoch == start.epoch ? start.next_batch : 0;
      io::Prefetcher prefetch(reader, plan, epoch, batch, prefetch_depth);
      ahead.emplace(model.input_shape());
      while (batch < plan.batches_per_epoch() && step < schedule.total_steps) {
        batch = train_step(prefetch, epoch, batch);
        // A checkpoint reads every parameter (ZeRO's all-gather may still be in flight).
        if (!o.checkpoint_dir.empty()) times.comm_exposed_s += sync.await_parameters();
        result.preempted = checkpoints.after_step(step, schedule.total_steps, epoch, batch, model, optimizer);
        if (result.preempted) return;
      }
      result.epochs_completed = epoch + 1;
      if (eval_reader) evaluate_epoch(epoch);
      if (o.after_epoch && !o.after_epoch(epoch, result.eval)) {
        result.stopped_early = true;
        return;
      }
    }
  }

  /// One optimiser step on global batches [first, first + accumulate) of `epoch` (fewer at the
  /// epoch's end); returns the batch after them.
  std::int64_t train_step(io::Prefetcher& prefetch, std::int64_t epoch, std::int64_t first) {
    const std::int64_t end = std::min(plan.batches_per_epoch(), first + o.accumulate);
    OptimizerStep s{step, {}};
    for (std::int64_t b = first; b < end; ++b) s.batch_sizes.push_back(plan.global_batch_size(b));
    const bool record = timeline.enabled() && step < o.timeline_steps;
    sync.begin_step(s);
    const auto fetch = [&] { return next_batch(prefetch, epoch, record); };
    for (std::int64_t b = first; b < end; ++b) {
      const io::Batch batch = ahead->take(fetch);
      const DeviceBatch& device = ahead->current();
      // The next micro-batch's copy overlaps this one's compute, unless this is the epoch's or the run's last.
      if (b + 1 < plan.batches_per_epoch() && (b + 1 < end || step + 1 < schedule.total_steps)) ahead->start_next(fetch);
      const auto t_compute = Clock::now();
      sync.accumulate(
          MicroBatch{batch, plan.rank_slice(b).offset, plan.rank_sample_position(epoch, b), record, &device});
      times.compute_s += seconds(t_compute, Clock::now());
    }
    times.comm_exposed_s += sync.finish_step();
    times.compute_s -= sync.waited_inside_accumulate();  // counted as communication, not twice
    if (!step_is_finite(epoch)) {  // skipped: nothing applied, the schedule moves on
      ++step;
      throughput.after_step(step, s.samples(), Clock::now());
      return end;
    }
    const auto t_optimizer = Clock::now();
    const double gather_s = sync.apply(optimizer, schedule.at(step), o.clip_norm);
    const auto t_end = Clock::now();
    if (record) timeline.add(Span{"optimizer", "optimizer", 0, t_optimizer, t_end});
    times.compute_s += seconds(t_optimizer, t_end) - gather_s;
    times.comm_exposed_s += gather_s;
    ++step;
    throughput.after_step(step, s.samples(), t_end);
    report.after_step(step, epoch, sync.step_loss(), s.samples(), t_end, times);
    return end;
  }

  /// Collective, before step `step + 1` is applied: whether its loss and summed gradient are
  /// finite on every rank. When not, it is skipped (printed, recorded, counted) while
  /// --skip-nonfinite-steps allows, and stops the run otherwise.
  bool step_is_finite(std::int64_t epoch) {
    const StepFiniteness f = check_finite_step(comm, sync.step_loss(), sync.count_nonfinite_gradient());
    if (f.finite()) return true;
    const std::string what = f.describe(step + 1, comm.rank(), sync.step_loss());
    if (result.skipped_steps >= o.skip_nonfinite_steps) {
      throw_nonfinite_step(comm, o.skip_nonfinite_steps == 0
                                     ? what
                                     : what + " (--skip-nonfinite-steps " + std::to_string(o.skip_nonfinite_steps) +
                                           " skipped " + std::to_string(result.skipped_steps) + " already)");
    }
    ++result.skipped_steps;
    report.after_skipped_step(step + 1, epoch, what, result.skipped_steps);
    return false;
  }

  io::Batch next_batch(io::Prefetcher& prefetch, std::int64_t epoch, bool record) {
    const auto t_wait = Clock::now();
    std::optional<io::Batch> batch = prefetch.next();
    HPCTRAIN_REQUIRE(batch.has_value(), "data loader ended early in epoch " + std::to_string(epoch));
    const auto t_ready = Clock::now();
    times.data_wait_s += seconds(t_wait, t_ready);
    if (record) timeline.add(Span{"data wait", "data", 0, t_wait, t_ready});
    return std::move(*batch);
  }

  void evaluate_epoch(std::int64_t epoch) {
    const auto t_eval = Clock::now();
    result.eval = evaluate(model, *eval_reader, comm);
    throughput.exclude(step, seconds(t_eval, Clock::now()));
    report.after_eval(step, epoch, result.eval);
  }

  /// Collective: the bytes this rank holds, the largest over the ranks.
  MemoryUse memory_use() const {
    std::uint64_t state = 0;
    for (const auto& s : optimizer.state()) state += s.tensor.data.extent(0) * sizeof(float);
    const GradientSync::HeldBytes held = sync.held_bytes();
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    std::int64_t bytes[4] = {static_cast<std::int64_t>(state), static_cast<std::int64_t>(held.gradients),
                             static_cast<std::int64_t>(held.parameters),
                             static_cast<std::int64_t>(usage.ru_maxrss) * 1024};  // ru_maxrss: KiB on Linux
    comm.allreduce(bytes, 4, coll::ReduceOp::max);
    return MemoryUse{static_cast<std::uint64_t>(bytes[0]), static_cast<std::uint64_t>(bytes[1]),
                     static_cast<std::uint64_t>(bytes[2]), static_cast<std::uint64_t>(bytes[3])};
  }

  /// Collective: the run's totals, checksum and timeline; the closing lines.
  TrainResult finish(Clock::time_point run_start) {
    times.comm_exposed_s += sync.await_parameters();  // the checksum reads every parameter
    const auto run_end = Clock::now();
    result.samples_per_s = throughput.samples_per_s(comm, run_end);
    result.steps = step;
    result.seconds = seconds(run_start, run_end);
    result.compute_s = times.compute_s;
    result.comm_exposed_s = times.comm_exposed_s;
    result.data_wait_s = times.data_wait_s;
    result.final_train_loss = report.last_train_loss();
    result.checkpoints_written = checkpoints.checkpoints_written();
    result.parameter_count = model.parameter_count();
    const std::vector<float> params = core::to_host(model.parameter_buffer());
    result.parameter_checksum = parameter_checksum(params.data(), params.size());
    if (o.keep_parameters) result.parameters = params;
    int overlap[2] = {sync.overlap_observed() ? 1 : 0, sync.gather_overlap_observed() ? 1 : 0};
    comm.allreduce(overlap, 2, coll::ReduceOp::max);
    result.overlap_observed = overlap[0] != 0;
    result.gather_overlap_observed = overlap[1] != 0;
    result.memory = memory_use();
    if (!o.timeline_path.empty()) write_chrome_trace(timeline, comm, o.timeline_path);
    report.print_summary(result);
    return result;
  }
};

}  // namespace

std::string strategy_names() { return "ddp, zero1, zero2"; }

std::uint64_t parameter_checksum(const float* data, std::size_t count) {
  return XXH3_64bits(data, count * sizeof(float));
}

TrainResult run_training(const TrainOptions& o, coll::Communicator& comm) {
  validate(o);
  require_writable_outputs(comm, o);
  io::DatasetReaderOptions read_options;
  read_options.mean = o.normalize_mean;
  read_options.stddev = o.normalize_std;
  const io::DatasetReader reader(o.data, read_options);
  std::optional<io::DatasetReader> eval_reader;
  if (!o.eval_data.empty()) eval_reader.emplace(o.eval_data, read_options);
  const auto model = plan_checked_model(o, reader, eval_reader);
  MemoryEstimate memory = estimate_training_memory(*model, o, comm.size(), eval_reader.has_value());
  const int ranks_on_node = compute_threads().ranks_on_node;
  const bool hold_in_memory = training_split_fits_in_memory(o, reader.info(), memory, ranks_on_node);
  if (hold_in_memory) memory.data += io::InMemoryDataset::bytes_needed(reader.info());
  // Before anything large is allocated: the parameters and gradients, activations, workspace.
  require_memory_fits(comm, memory, ranks_on_node);
  if (!model->finalized()) model->finalize(models::model_seed(o.model));
  std::optional<io::InMemoryDataset> in_memory;
  if (hold_in_memory) in_memory.emplace(reader);
  const io::SampleSource& train_source = in_memory ? static_cast<const io::SampleSource&>(*in_memory) : reader;

  comm.barrier();  // common origin for the timeline
  Timeline timeline(!o.timeline_path.empty());
  const std::size_t gradient_buckets = plan_gradient_buckets(model->parameter_info(), o.parallel).size();
  broadcast_parameters(comm, ParameterBuffers::of(*model));
  // Deterministic mode: OpenBLAS and oneDNN on one thread (their split changes the bits), the
  // thread-count-independent kernels on the rank's threads, and whole micro-shards per rank.
  std::optional<SingleThreadedLibraries> single_threaded;
  if (o.deterministic) single_threaded.emplace();
  const io::EpochPlan plan(reader.info().count, o.global_batch, comm.rank(), comm.size(), o.seed, o.drop_last,
                           /*shuffle=*/true, o.deterministic ? o.micro_shard : 1, o.shuffle_block);
  const auto sync = make_gradient_sync(o, comm, *model, timeline);

  LrSchedule schedule = o.schedule;
  schedule.base_lr = scale_learning_rate(o.lr, o.global_batch * o.accumulate, o.lr_reference_batch, o.lr_scaling);
  schedule.total_steps = count_total_steps(o, plan);
  const auto optimizer = make_optimizer(o, schedule.at(0));
  ResumePoint start;
  const io::CheckpointDirLock dir_lock =
      o.checkpoint_dir.empty()
          ? io::CheckpointDirLock()
          : io::claim_checkpoint_dir(comm, o.checkpoint_dir, o.resume != "none", o.overwrite_checkpoints);
  if (o.resume != "none") {
    start = resume_from_checkpoint(comm, o, *model, *optimizer, plan.count(), sync->optimizer_shard());
  }
  if (start.next_batch >= plan.batches_per_epoch()) {
    ++start.epoch;
    start.next_batch = 0;
  }
  CheckpointPolicy checkpoints(o, comm, plan.count(), sync->optimizer_shard());
  ProgressReport report(o, comm, schedule, schedule.total_steps);
  report.print_start(RunDescription{model->parameter_count(), plan.count(), schedule.total_steps,
                                    (plan.batches_per_epoch() + o.accumulate - 1) / o.accumulate, gradient_buckets,
                                    single_threaded ? single_threaded->blas_threads() : 0,
                                    single_threaded ? single_threaded->kernel_threads() : 0, in_memory.has_value(),
                                    o.deterministic && (!(model->supports_gradient_leaves() && grouped_deterministic_passes_from_environment()) ||
                                                       model->leaves_one_at_a_time())});

  TrainingLoop loop{o, comm, train_source, in_memory ? 0 : o.prefetch_depth, eval_reader, *model, plan, *sync, *optimizer, schedule, timeline,
                    checkpoints, report, start.step, ThroughputMeter(start.step, o.warmup_steps_for_throughput),
                    TimeTotals{}, TrainResult{}, std::nullopt};
  loop.result.resumed_from = start.path;
  loop.result.epochs_completed = start.epoch;  // a resumed run counts the epochs before it
  const auto run_start = Clock::now();
  loop.run(start);
  return loop.finish(run_start);
}

}  // namespace hpctrain::train
