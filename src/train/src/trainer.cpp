#include "hpctrain/train/trainer.hpp"

#include <Kokkos_Core.hpp>
#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <memory>
#include <optional>
#include <string>

#include "hpctrain/collectives/agreement.hpp"
#include "hpctrain/collectives/error.hpp"
#include "hpctrain/collectives/reproducible_sum.hpp"
#include "hpctrain/core/environment.hpp"
#include "hpctrain/core/loss.hpp"
#include "hpctrain/core/optimizer.hpp"
#include "hpctrain/core/tensor.hpp"
#include "hpctrain/io/checkpoint.hpp"
#include "hpctrain/io/checkpoint_lock.hpp"
#include "hpctrain/io/dataset.hpp"
#include "hpctrain/io/epoch_plan.hpp"
#include "hpctrain/io/prefetcher.hpp"
#include "hpctrain/models/registry.hpp"
#include "hpctrain/train/finite_guard.hpp"
#include "hpctrain/train/output_checks.hpp"
#include "hpctrain/train/preemption.hpp"

namespace hpctrain::train {

namespace {

using Clock = std::chrono::steady_clock;
double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

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
  HPCTRAIN_REQUIRE(o.prefetch_depth >= 1, "--prefetch must be at least 1");
  HPCTRAIN_REQUIRE(o.micro_shard >= 1, "--micro-shard must be at least 1, got " + std::to_string(o.micro_shard));
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

/// Host batch -> model input and labels (reusing device storage across steps).
struct DeviceBatch {
  core::Tensor<float> x;
  core::Labels labels;

  void load(const io::Batch& b, const core::Shape& sample_shape) {
    core::Shape shape{static_cast<std::int64_t>(b.count)};
    shape.insert(shape.end(), sample_shape.begin(), sample_shape.end());
    core::ensure_shape(x, "hpctrain::batch::x", shape);
    core::from_host(x.data, b.samples);
    if (labels.extent(0) != b.count) labels = core::Labels("hpctrain::batch::labels", b.count);
    Kokkos::View<const std::int32_t*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> host(
        b.labels.data(), b.count);
    Kokkos::deep_copy(labels, host);
  }

  /// Rows [first, first + rows) of `b` only (one micro-shard).
  void load_rows(const io::Batch& b, std::size_t first, std::size_t rows, const core::Shape& sample_shape) {
    std::int64_t per_sample = 1;
    for (auto d : sample_shape) per_sample *= d;
    core::Shape shape{static_cast<std::int64_t>(rows)};
    shape.insert(shape.end(), sample_shape.begin(), sample_shape.end());
    core::ensure_shape(x, "hpctrain::batch::x", shape);
    Kokkos::View<const float*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> samples(
        b.samples.data() + first * static_cast<std::size_t>(per_sample), rows * static_cast<std::size_t>(per_sample));
    Kokkos::deep_copy(x.data, samples);
    if (labels.extent(0) != rows) labels = core::Labels("hpctrain::batch::labels", rows);
    Kokkos::View<const std::int32_t*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> host(
        b.labels.data() + first, rows);
    Kokkos::deep_copy(labels, host);
  }
};

/// Deterministic mode's gradient path. Each micro-shard's gradient is copied out of the model's
/// gradient buffer as a term of an exact fixed-point sum (coll::ReproducibleSum, one scale per
/// parameter tensor); at the optimiser step the terms of the whole step (all micro-batches of
/// an accumulation group) are summed exactly over the ranks and written back. The sum depends
/// only on the set of micro-shards, which the global batch fixes, never on the rank count.
class MicroShardGradients {
 public:
  explicit MicroShardGradients(const models::Sequential<float>& model)
      : count_(static_cast<std::size_t>(model.parameter_count())) {
    auto info = model.parameter_info();
    std::sort(info.begin(), info.end(), [](const auto& a, const auto& b) { return a.offset < b.offset; });
    for (const auto& p : info) {
      const auto end = static_cast<std::size_t>(p.offset + p.count);
      if (p.count > 0 && (block_ends_.empty() || end > block_ends_.back())) block_ends_.push_back(end);
    }
    if (block_ends_.empty() || block_ends_.back() != count_) block_ends_.push_back(count_);
  }
  MicroShardGradients(const MicroShardGradients&) = delete;
  MicroShardGradients& operator=(const MicroShardGradients&) = delete;

  /// Starts a step whose gradient is the sum of `total_terms` micro-shards over all ranks.
  void begin_step(std::int64_t total_terms) {
    if (!sum_ || total_terms != total_terms_) {
      sum_.emplace(count_, block_ends_, total_terms);
      total_terms_ = total_terms;
    } else {
      sum_->reset();
    }
    terms_ = 0;
  }
  /// After one micro-shard's backward (the gradient buffer holds only its gradient).
  void collect(const core::Vec<float>& grads) {
    if (store_.size() < (terms_ + 1) * count_) store_.resize((terms_ + 1) * count_);
    float* slot = store_.data() + terms_ * count_;
    Kokkos::View<float*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> host(slot, count_);
    Kokkos::deep_copy(host, grads);
    sum_->observe(slot);
    ++terms_;
  }
  /// Collective: the exact sum over all ranks' micro-shards, written into `grads`.
  void finish(coll::Communicator& comm, const core::Vec<float>& grads, coll::Algorithm algo) {
    sum_->agree_scales(comm);
    for (std::size_t t = 0; t < terms_; ++t) sum_->add(store_.data() + t * count_);
    result_.resize(count_);
    sum_->finish(comm, result_.data(), algo);
    Kokkos::View<const float*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> host(result_.data(), count_);
    Kokkos::deep_copy(grads, host);
  }

 private:
  std::size_t count_;
  std::vector<std::size_t> block_ends_;
  std::optional<coll::ReproducibleSum<float>> sum_;
  std::int64_t total_terms_ = 0;
  std::size_t terms_ = 0;
  std::vector<float> store_, result_;
};

/// Sets the BLAS thread count for the duration of a run (0: leaves it alone) and restores the
/// previous count afterwards, so a caller's later BLAS use is not changed behind its back.
class BlasThreadsOverride {
 public:
  explicit BlasThreadsOverride(int threads) {
    if (threads > 0) {
      previous_ = blas_threads();
      now_ = set_blas_threads(threads);
    }
  }
  ~BlasThreadsOverride() {
    if (previous_ > 0) set_blas_threads(previous_);
  }
  BlasThreadsOverride(const BlasThreadsOverride&) = delete;
  BlasThreadsOverride& operator=(const BlasThreadsOverride&) = delete;
  /// The count in force (-1: the BLAS is not OpenBLAS; 0: not overridden).
  int threads() const noexcept { return now_; }

 private:
  int previous_ = 0, now_ = 0;
};

/// Number of micro-shards of `batch_size` samples: the last may be shorter.
std::int64_t micro_shards(std::int64_t batch_size, std::int64_t micro_shard) {
  return (batch_size + micro_shard - 1) / micro_shard;
}

/// Evaluation, in every mode: the test set is cut into fixed batches of 256 (as on one rank;
/// the CNN's im2col workspace grows with the batch, and at 1000 its second conv alone needs
/// 627 MB twice); rank r evaluates batches r, r + P, ...; every batch's loss sum and correct
/// count go to its own slot, the slots are all-reduced (one non-zero term per slot: exact) and
/// summed in batch order, so loss and accuracy do not depend on P. The slots cost one
/// all-reduce of a few hundred bytes per evaluation.
EvalResult evaluate(models::Sequential<float>& model, const io::DatasetReader& reader,
                                  coll::Communicator& comm) {
  const std::int64_t n = reader.info().count;
  io::EpochPlan plan(n, 256, 0, 1, 0, /*drop_last=*/false, /*shuffle=*/false);
  const std::int64_t batches = plan.batches_per_epoch();
  std::vector<double> loss(static_cast<std::size_t>(batches), 0.0);
  std::vector<std::int64_t> correct(static_cast<std::size_t>(batches), 0);
  DeviceBatch device;
  core::Tensor<float> dlogits;
  for (std::int64_t b = comm.rank(); b < batches; b += comm.size()) {
    io::Batch batch = io::read_batch(reader, plan, 0, b);
    if (batch.count == 0) continue;
    device.load(batch, model.input_shape());
    core::Tensor<float> logits = model.forward(device.x, /*train=*/false);
    core::ensure_shape(dlogits, "hpctrain::eval::dlogits", logits.shape);
    const auto rows = static_cast<std::int64_t>(batch.count);
    loss[static_cast<std::size_t>(b)] = core::softmax_cross_entropy(logits, device.labels, rows, dlogits) * static_cast<double>(rows);
    correct[static_cast<std::size_t>(b)] = core::count_correct(logits, device.labels);
  }
  comm.allreduce(loss.data(), loss.size(), coll::ReduceOp::sum);
  comm.allreduce(correct.data(), correct.size(), coll::ReduceOp::sum);
  EvalResult r;
  r.samples = n;
  double loss_sum = 0.0;
  std::int64_t right = 0;
  for (std::size_t b = 0; b < loss.size(); ++b) {
    loss_sum += loss[b];
    right += correct[b];
  }
  if (n > 0) {
    r.loss = loss_sum / static_cast<double>(n);
    r.accuracy = static_cast<double>(right) / static_cast<double>(n);
  }
  return r;
}


std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const auto t = static_cast<long long>(s + 0.5);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", t / 3600, (t / 60) % 60, t % 60);
  return buf;
}

/// Gathers every rank's Chrome-trace events to rank 0, which writes the file.
void write_timeline(const Timeline& timeline, coll::Communicator& comm, const std::string& path) {
  const std::string mine = timeline.chrome_events(comm.rank());
  std::int64_t length = static_cast<std::int64_t>(mine.size());
  std::int64_t longest = length;
  comm.allreduce(&longest, 1, coll::ReduceOp::max);
  const std::size_t words = static_cast<std::size_t>((longest + 7) / 8) + 1;  // +1: the length
  std::vector<std::int64_t> packed(words, 0), all(words * static_cast<std::size_t>(comm.size()));
  packed[0] = length;
  std::memcpy(packed.data() + 1, mine.data(), mine.size());
  comm.allgather(packed.data(), all.data(), words, coll::DataType::i64);
  if (comm.rank() != 0) return;
  std::ofstream out(path);
  HPCTRAIN_REQUIRE(out.good(), "--timeline: cannot write '" + path + "'");
  out << "{\"traceEvents\":[";
  for (int r = 0; r < comm.size(); ++r) {
    const std::int64_t* block = all.data() + static_cast<std::size_t>(r) * words;
    if (r) out << ",";
    out.write(reinterpret_cast<const char*>(block + 1), block[0]);
  }
  out << "],\"displayTimeUnit\":\"ms\"}\n";
}


using coll::agree_with_rank0;
using coll::broadcast_string;

/// What must match between a checkpoint and the run that resumes from it, so the sample
/// sequence and the model are the same.
nlohmann::json run_identity(const TrainOptions& o, std::int64_t samples) {
  nlohmann::json id = {{"model", o.model},       {"global_batch", o.global_batch}, {"accumulate", o.accumulate},
                       {"seed", o.seed},         {"drop_last", o.drop_last},       {"optimizer", o.optimizer},
                       {"data_samples", samples}};
  // Only deterministic runs add these, so checkpoints of ordinary runs keep resuming as before;
  // a deterministic run resumes only a deterministic checkpoint with the same micro-shards.
  if (o.deterministic) {
    id["deterministic"] = true;
    id["micro_shard"] = o.micro_shard;
  }
  return id;
}

struct HostState {
  std::vector<float> params;
  std::vector<std::pair<std::string, std::vector<float>>> optimizer;  // (state name, values)
};

std::vector<io::CheckpointTensor> checkpoint_tensors(const models::Sequential<float>& model, const HostState& h) {
  std::vector<io::CheckpointTensor> out;
  for (const auto& p : model.parameter_info()) out.push_back({"params/" + p.name, p.shape, h.params.data() + p.offset});
  for (const auto& [state, values] : h.optimizer) {
    for (const auto& p : model.parameter_info()) {
      out.push_back({"optimizer/" + state + "/" + p.name, p.shape, values.data() + p.offset});
    }
  }
  return out;
}

void save_checkpoint(coll::Communicator& comm, const TrainOptions& o, models::Sequential<float>& model,
                     core::Optimizer<float>& optimizer, std::int64_t step, std::int64_t epoch, std::int64_t next_batch,
                     std::int64_t samples, const char* reason, bool chatty) {
  Kokkos::fence();
  if (optimizer.state().empty()) optimizer.allocate_state(model.parameter_count());
  HostState h;
  h.params = core::to_host(model.parameter_buffer());
  require_finite_parameters(h.params.data(), h.params.size(), step);
  for (const auto& s : optimizer.state()) h.optimizer.emplace_back(s.name, core::to_host(s.tensor.data));
  nlohmann::json meta = run_identity(o, samples);
  meta["step"] = step;
  meta["epoch"] = epoch;
  meta["next_batch"] = next_batch;
  meta["optimizer_step_count"] = optimizer.step_count();
  meta["parameter_checksum"] = parameter_checksum(h.params.data(), h.params.size());
  meta["reason"] = reason;
  const auto r = io::write_checkpoint(comm, o.checkpoint_dir, step, meta, checkpoint_tensors(model, h), o.keep);
  if (chatty) {
    std::printf("hpctrain: checkpoint %s (%s): %.1f MB in %.2f s (%.0f MB/s)\n", r.path.c_str(), reason,
                static_cast<double>(r.bytes) / 1e6, r.seconds, static_cast<double>(r.bytes) / 1e6 / std::max(r.seconds, 1e-9));
    std::fflush(stdout);
  }
}

struct ResumePoint {
  std::string path;
  std::int64_t step = 0, epoch = 0, next_batch = 0;
};

ResumePoint resume_from_checkpoint(coll::Communicator& comm, const TrainOptions& o, models::Sequential<float>& model,
                                   core::Optimizer<float>& optimizer, std::int64_t samples, bool chatty) {
  ResumePoint point;
  std::string chosen;
  std::exception_ptr error;
  if (comm.rank() == 0) {
    try {
      if (o.resume == "auto") {
        HPCTRAIN_REQUIRE(!o.checkpoint_dir.empty(), "--resume auto needs --checkpoint-dir");
        std::vector<io::CheckpointProblem> skipped;
        chosen = io::find_latest_checkpoint(o.checkpoint_dir, &skipped);
        for (const auto& p : skipped) std::fprintf(stderr, "hpctrain: skipping checkpoint: %s: %s\n", p.path.c_str(), p.what.c_str());
        if (chosen.empty() && chatty) std::printf("hpctrain: no valid checkpoint in '%s': starting fresh\n", o.checkpoint_dir.c_str());
      } else {
        const auto problems = io::verify_checkpoint(o.resume);
        std::string all;
        for (const auto& p : problems) all += (all.empty() ? "" : "; ") + p.path + ": " + p.what;
        HPCTRAIN_REQUIRE(problems.empty(), "--resume '" + o.resume + "' is not a valid checkpoint: " + all);
        chosen = o.resume;
      }
      if (!chosen.empty()) {
        const std::string unprotected = io::manifest_warning(io::read_manifest(chosen));
        if (!unprotected.empty()) std::fprintf(stderr, "hpctrain: warning: %s: %s\n", chosen.c_str(), unprotected.c_str());
        const nlohmann::json meta = io::read_manifest(chosen).at("metadata");
        const nlohmann::json want = run_identity(o, samples);
        for (const auto& [key, value] : want.items()) {
          HPCTRAIN_REQUIRE(meta.contains(key) && meta.at(key) == value,
                           "checkpoint '" + chosen + "' was written with " + key + " = " +
                               (meta.contains(key) ? meta.at(key).dump() : std::string("(absent)")) +
                               ", this run has " + value.dump() + ": resume needs the same value");
        }
      }
    } catch (...) {
      error = std::current_exception();
    }
  }
  agree_with_rank0(comm, error);
  point.path = broadcast_string(comm, chosen);
  if (point.path.empty()) return point;

  const nlohmann::json meta = io::read_manifest(point.path).at("metadata");
  optimizer.allocate_state(model.parameter_count());
  HostState h;
  h.params.resize(static_cast<std::size_t>(model.parameter_count()));
  const auto state = optimizer.state();
  for (const auto& s : state) h.optimizer.emplace_back(s.name, std::vector<float>(h.params.size()));
  std::vector<io::CheckpointDestination> dests;
  for (const auto& t : checkpoint_tensors(model, h)) dests.push_back({t.name, t.shape, const_cast<float*>(t.data)});
  io::read_checkpoint_tensors(point.path, dests);
  // End to end: the parameters as reassembled on this rank (from any number of shards) must
  // hash to what the writer hashed before splitting them.
  if (meta.contains("parameter_checksum")) {
    HPCTRAIN_REQUIRE(meta.at("parameter_checksum").get<std::uint64_t>() == parameter_checksum(h.params.data(), h.params.size()),
                     "checkpoint '" + point.path + "': the parameters read back do not match the checksum recorded "
                     "when they were written");
  }
  core::from_host(model.parameter_buffer(), h.params);
  for (std::size_t i = 0; i < state.size(); ++i) core::from_host(state[i].tensor.data, h.optimizer[i].second);
  optimizer.set_step_count(meta.at("optimizer_step_count").get<std::int64_t>());
  point.step = meta.at("step").get<std::int64_t>();
  point.epoch = meta.at("epoch").get<std::int64_t>();
  point.next_batch = meta.at("next_batch").get<std::int64_t>();
  Kokkos::fence();
  if (chatty) {
    std::printf("hpctrain: resumed from %s (step %lld, epoch %lld, batch %lld; written by %lld ranks)\n",
                point.path.c_str(), static_cast<long long>(point.step), static_cast<long long>(point.epoch + 1),
                static_cast<long long>(point.next_batch),
                static_cast<long long>(io::read_manifest(point.path).at("world_size").get<std::int64_t>()));
    std::fflush(stdout);
  }
  return point;
}

}  // namespace

std::uint64_t parameter_checksum(const float* data, std::size_t count) {
  return XXH3_64bits(data, count * sizeof(float));
}

TrainResult run_training(const TrainOptions& o, coll::Communicator& comm) {
  validate(o);
  require_writable_outputs(comm, o);
  const int rank = comm.rank();
  const bool chatty = rank == 0 && !o.quiet;

  io::DatasetReaderOptions read_options;
  read_options.mean = o.normalize_mean;
  read_options.stddev = o.normalize_std;
  io::DatasetReader reader(o.data, read_options);
  std::optional<io::DatasetReader> eval_reader;
  if (!o.eval_data.empty()) eval_reader.emplace(o.eval_data, read_options);

  auto model = models::build_model<float>(o.model);
  const auto classes = static_cast<std::int32_t>(model->output_shape().back());
  reader.require_compatible(model->input_shape(), classes);
  if (eval_reader) eval_reader->require_compatible(model->input_shape(), classes);

  comm.barrier();  // common origin for the timeline
  Timeline timeline(!o.timeline_path.empty());
  DataParallel dp(comm, *model, o.parallel, &timeline);
  dp.broadcast_parameters();

  // Deterministic mode: BLAS on one thread (its gemm split changes the bits) and whole
  // micro-shards per rank.
  const BlasThreadsOverride blas_override(o.deterministic ? 1 : 0);
  const int blas_thread_count = blas_override.threads();
  io::EpochPlan plan(reader.info().count, o.global_batch, rank, comm.size(), o.seed, o.drop_last, /*shuffle=*/true,
                     o.deterministic ? o.micro_shard : 1);
  std::optional<MicroShardGradients> exact;
  if (o.deterministic) exact.emplace(*model);
  std::vector<double> group_losses;  // deterministic: one slot per micro-shard of the step
  std::int64_t group_term_base = 0;
  const std::int64_t batches = plan.batches_per_epoch();
  HPCTRAIN_REQUIRE(batches > 0, "--global-batch " + std::to_string(o.global_batch) + " is larger than the " +
                                    std::to_string(reader.info().count) + " samples of '" + o.data +
                                    "' with drop-last on: no full batch")
  ;
  const std::int64_t steps_per_epoch = (batches + o.accumulate - 1) / o.accumulate;
  std::int64_t total_steps = steps_per_epoch * o.epochs;
  if (o.max_steps > 0) total_steps = std::min(total_steps, o.max_steps);

  LrSchedule schedule = o.schedule;
  schedule.base_lr = scale_learning_rate(o.lr, o.global_batch * o.accumulate, o.lr_reference_batch, o.lr_scaling);
  schedule.total_steps = total_steps;
  auto optimizer = make_optimizer(o, schedule.at(0));
  const std::int64_t samples = reader.info().count;
  ResumePoint start;
  const io::CheckpointDirLock dir_lock = o.checkpoint_dir.empty() ? io::CheckpointDirLock() : io::claim_checkpoint_dir(comm, o.checkpoint_dir, o.resume != "none", o.overwrite_checkpoints);
  if (o.resume != "none") start = resume_from_checkpoint(comm, o, *model, *optimizer, samples, chatty);
  if (start.next_batch >= batches) {
    ++start.epoch;
    start.next_batch = 0;
  }
  const bool checkpointing = !o.checkpoint_dir.empty();
  HPCTRAIN_REQUIRE(o.checkpoint_every >= 0 && o.checkpoint_every_s >= 0, "--checkpoint-every must be non-negative");
  HPCTRAIN_REQUIRE(!checkpointing || o.keep >= 1, "--keep must be at least 1");
  if (checkpointing) install_preemption_handlers();

  std::ofstream metrics;
  if (rank == 0 && !o.metrics_path.empty()) {
    metrics.open(o.metrics_path);
    HPCTRAIN_REQUIRE(metrics.good(), "--metrics: cannot write '" + o.metrics_path + "'");
  }
  if (chatty) {
    std::printf("hpctrain: %s, %lld parameters, %d ranks, global batch %lld%s, %lld steps (%lld epochs x %lld)\n",
                o.model.value("name", std::string("model")).c_str(), static_cast<long long>(model->parameter_count()),
                comm.size(), static_cast<long long>(o.global_batch),
                o.accumulate > 1 ? (" x " + std::to_string(o.accumulate) + " accumulated").c_str() : "",
                static_cast<long long>(total_steps), static_cast<long long>(o.epochs),
                static_cast<long long>(steps_per_epoch));
    std::printf("hpctrain: data '%s' (%lld samples), %zu gradient buckets, lr %.4g (%s schedule)\n", o.data.c_str(),
                static_cast<long long>(reader.info().count), dp.buckets().size(), schedule.base_lr,
                to_string(schedule.kind).c_str());
    if (o.deterministic) {
      std::printf("hpctrain: deterministic mode: micro-shards of %lld samples (%lld per global batch), exact "
                  "fixed-point gradient sum, BLAS threads per rank: %s\n",
                  static_cast<long long>(o.micro_shard),
                  static_cast<long long>(micro_shards(o.global_batch, o.micro_shard)),
                  blas_thread_count < 0 ? "not OpenBLAS (set its thread count to 1 yourself)"
                                   : std::to_string(blas_thread_count).c_str());
    }
    std::fflush(stdout);
  }

  TrainResult result;
  result.parameter_count = model->parameter_count();
  result.resumed_from = start.path;
  DeviceBatch device;
  core::Tensor<float> dlogits;
  std::int64_t step = start.step;
  const std::int64_t first_step = start.step;
  auto last_checkpoint = Clock::now();
  double window_loss = 0.0;
  std::int64_t window_steps = 0, window_samples = 0;
  double compute_s = 0, comm_s = 0, data_s = 0;
  Clock::time_point throughput_start{}, window_start = Clock::now();
  std::int64_t throughput_samples = 0;
  double eval_after_warmup_s = 0;  // evaluation is not training: kept out of samples/s
  const auto run_start = Clock::now();

  for (std::int64_t epoch = start.epoch; epoch < o.epochs && step < total_steps && !result.preempted; ++epoch) {
    const std::int64_t first_batch = epoch == start.epoch ? start.next_batch : 0;
    io::Prefetcher prefetch(reader, plan, epoch, first_batch, o.prefetch_depth);
    std::int64_t micro = 0;
    double step_loss = 0.0;
    std::int64_t divisor = 0, step_samples = 0;
    for (std::int64_t b = first_batch; b < batches && step < total_steps; ++b) {
      const bool record = timeline.enabled() && step < o.timeline_steps;
      const auto t_data = Clock::now();
      std::optional<io::Batch> batch = prefetch.next();
      HPCTRAIN_REQUIRE(batch.has_value(), "data loader ended early in epoch " + std::to_string(epoch));
      const auto t_compute = Clock::now();
      data_s += seconds(t_data, t_compute);
      if (record) timeline.add(Span{"data wait", "data", 0, t_data, t_compute});

      if (micro == 0) {
        model->zero_gradients();
        divisor = 0;
        const std::int64_t group_end = std::min(batches, b + o.accumulate);
        for (std::int64_t g = b; g < group_end; ++g) divisor += plan.global_batch_size(g);
        step_loss = 0.0;
        step_samples = 0;
        if (exact) {
          std::int64_t terms = 0;
          for (std::int64_t g = b; g < group_end; ++g) terms += micro_shards(plan.global_batch_size(g), o.micro_shard);
          exact->begin_step(terms);
          group_losses.assign(static_cast<std::size_t>(terms), 0.0);
          group_term_base = 0;
        }
      }
      const bool sync = micro == o.accumulate - 1 || b == batches - 1;
      if (!exact) dp.begin_step(sync);
      Clock::time_point backward_end = t_compute;
      if (exact) {
        // This rank's whole micro-shards of batch b, each forward/backward on its own.
        const io::RankSlice slice = plan.rank_slice(b);
        const auto m = static_cast<std::size_t>(o.micro_shard);
        for (std::size_t first = 0; first < batch->count; first += m) {
          const std::size_t rows = std::min(m, batch->count - first);
          device.load_rows(*batch, first, rows, model->input_shape());
          model->zero_gradients();
          model->set_rng_position(static_cast<std::uint64_t>(step), epoch * reader.info().count +
                                                                       b * o.global_batch + slice.offset +
                                                                       static_cast<std::int64_t>(first));
          core::Tensor<float> logits = model->forward(device.x, /*train=*/true);
          core::ensure_shape(dlogits, "hpctrain::train::dlogits", logits.shape);
          const auto term = static_cast<std::size_t>(group_term_base + (slice.offset + static_cast<std::int64_t>(first)) /
                                                                           o.micro_shard);
          group_losses[term] = core::softmax_cross_entropy(logits, device.labels, divisor, dlogits);
          model->backward(dlogits, false);
          exact->collect(model->gradient_buffer());
        }
        group_term_base += micro_shards(plan.global_batch_size(b), o.micro_shard);
        Kokkos::fence();
        backward_end = Clock::now();
        if (record) timeline.add(Span{"micro-shards forward/backward", "compute", 0, t_compute, backward_end});
      } else if (batch->count > 0) {
        device.load(*batch, model->input_shape());
        model->set_rng_position(static_cast<std::uint64_t>(step),
                                epoch * reader.info().count + b * o.global_batch + plan.rank_slice(b).offset);
        core::Tensor<float> logits = model->forward(device.x, /*train=*/true);
        core::ensure_shape(dlogits, "hpctrain::train::dlogits", logits.shape);
        step_loss += core::softmax_cross_entropy(logits, device.labels, divisor, dlogits);
        const auto t_backward = Clock::now();
        if (record) timeline.add(Span{"forward", "compute", 0, t_compute, t_backward});
        model->backward(dlogits, false, dp.backward_hook());
        Kokkos::fence();
        backward_end = Clock::now();
        if (record) timeline.add(Span{"backward", "compute", 0, t_backward, backward_end});
      }
      step_samples += plan.global_batch_size(b);
      const auto t_wait = Clock::now();
      double waited = exact ? 0.0 : dp.finish();
      if (exact && sync) {
        const auto t_sum = Clock::now();
        exact->finish(comm, model->gradient_buffer(), o.parallel.algorithm);
        // The step's loss: one slot per micro-shard, exact all-reduce (one non-zero term per
        // slot), summed in micro-shard order; counted once (on rank 0) in the window sum below.
        comm.allreduce(group_losses.data(), group_losses.size(), coll::ReduceOp::sum);
        double total = 0.0;
        for (double l : group_losses) total += l;
        step_loss = rank == 0 ? total : 0.0;
        waited = seconds(t_sum, Clock::now());
        if (record) timeline.add(Span{"exact gradient sum", "allreduce", 0, t_sum, Clock::now()});
      }
      comm_s += waited;
      if (sync) {
        require_finite_step_loss(comm, step_loss, step + 1);
        for (const auto& [started, finished] : dp.last_step_spans()) {
          if (started < backward_end && batch->count > 0) result.overlap_observed = true;
        }
        const auto t_opt = Clock::now();
        if (o.clip_norm > 0) core::clip_grad_norm(model->gradient_buffer(), o.clip_norm);  // already global
        optimizer->set_learning_rate(schedule.at(step));
        optimizer->step(model->parameter_buffer(), model->gradient_buffer());
        Kokkos::fence();
        const auto t_end = Clock::now();
        if (record) timeline.add(Span{"optimizer", "optimizer", 0, t_opt, t_end});
        compute_s += seconds(t_compute, t_wait) + seconds(t_opt, t_end);
        ++step;
        ++window_steps;
        window_loss += step_loss;  // this rank's share of the mean loss
        window_samples += step_samples;
        if (step - first_step == o.warmup_steps_for_throughput) throughput_start = t_end;
        if (step - first_step > o.warmup_steps_for_throughput) throughput_samples += step_samples;
        micro = 0;
        const bool last = step == total_steps;
        if ((o.log_every > 0 && step % o.log_every == 0) || last) {
          double loss = window_loss;
          comm.allreduce(&loss, 1, coll::ReduceOp::sum);
          loss /= static_cast<double>(window_steps);
          const double elapsed = seconds(window_start, t_end);
          const double rate = static_cast<double>(window_samples) / std::max(elapsed, 1e-9);
          const double eta = static_cast<double>(total_steps - step) * elapsed / static_cast<double>(window_steps);
          if (chatty) {
            std::printf("epoch %lld/%lld  step %lld/%lld  loss %.4f  lr %.4g  %.0f samples/s  ETA %s\n",
                        static_cast<long long>(epoch + 1), static_cast<long long>(o.epochs),
                        static_cast<long long>(step), static_cast<long long>(total_steps), loss,
                        schedule.at(step - 1), rate, format_duration(eta).c_str());
            std::fflush(stdout);
          }
          if (metrics.is_open()) {
            metrics << nlohmann::json{{"type", "train"}, {"step", step}, {"epoch", epoch}, {"loss", loss},
                                      {"lr", schedule.at(step - 1)}, {"samples_per_s", rate},
                                      {"compute_s", compute_s}, {"comm_exposed_s", comm_s}, {"data_wait_s", data_s}}
                           .dump()
                    << "\n";
            metrics.flush();
            require_written(metrics, "--metrics", o.metrics_path);
          }
          result.final_train_loss = loss;
          window_loss = 0;
          window_steps = 0;
          window_samples = 0;
          window_start = Clock::now();
        }
        if (checkpointing) {
          // All ranks agree at the step boundary: a signal on any rank, or rank 0's clock.
          int flags[2] = {preemption_requested() ? 1 : 0,
                          rank == 0 && o.checkpoint_every_s > 0 &&
                                  seconds(last_checkpoint, Clock::now()) >= o.checkpoint_every_s
                              ? 1
                              : 0};
          comm.allreduce(flags, 2, coll::ReduceOp::max);
          const bool periodic = (o.checkpoint_every > 0 && step % o.checkpoint_every == 0) || flags[1];
          if (flags[0] || periodic || step == total_steps) {
            save_checkpoint(comm, o, *model, *optimizer, step, epoch, b + 1, samples,
                            flags[0] ? "preemption" : (step == total_steps ? "final" : "periodic"), chatty);
            ++result.checkpoints_written;
            last_checkpoint = Clock::now();
          }
          if (flags[0]) {
            result.preempted = true;
            if (chatty) std::printf("hpctrain: preemption signal received: checkpointed at step %lld, exiting with %d (requeue)\n",
                                    static_cast<long long>(step), kExitRequeue);
            break;
          }
        }
      } else {
        compute_s += seconds(t_compute, t_wait);
        ++micro;
      }
    }
    if (result.preempted) break;
    result.epochs_completed = epoch + 1;
    if (eval_reader) {
      const auto t_eval = Clock::now();
      result.eval = evaluate(*model, *eval_reader, comm);
      if (step - first_step >= o.warmup_steps_for_throughput) eval_after_warmup_s += seconds(t_eval, Clock::now());
      if (chatty) {
        std::printf("epoch %lld/%lld  test loss %.4f  test accuracy %.2f%% (%lld samples)\n",
                    static_cast<long long>(epoch + 1), static_cast<long long>(o.epochs), result.eval.loss,
                    100.0 * result.eval.accuracy, static_cast<long long>(result.eval.samples));
        std::fflush(stdout);
      }
      if (metrics.is_open()) {
        metrics << nlohmann::json{{"type", "eval"}, {"step", step}, {"epoch", epoch}, {"loss", result.eval.loss},
                                  {"accuracy", result.eval.accuracy}}
                       .dump()
                << "\n";
        metrics.flush();
        require_written(metrics, "--metrics", o.metrics_path);
      }
    }
  }

  const auto run_end = Clock::now();
  double throughput_s = throughput_samples > 0 ? seconds(throughput_start, run_end) - eval_after_warmup_s : 0.0;
  comm.allreduce(&throughput_s, 1, coll::ReduceOp::max);  // the slowest rank sets the pace
  result.samples_per_s = throughput_s > 0 ? static_cast<double>(throughput_samples) / throughput_s : 0.0;
  result.steps = step;
  result.seconds = seconds(run_start, run_end);
  result.compute_s = compute_s;
  result.comm_exposed_s = comm_s;
  result.data_wait_s = data_s;
  const std::vector<float> params = core::to_host(model->parameter_buffer());
  result.parameter_checksum = parameter_checksum(params.data(), params.size());
  if (o.keep_parameters) result.parameters = params;
  int overlap = result.overlap_observed ? 1 : 0;
  comm.allreduce(&overlap, 1, coll::ReduceOp::max);
  result.overlap_observed = overlap != 0;
  if (!o.timeline_path.empty()) write_timeline(timeline, comm, o.timeline_path);
  if (metrics.is_open()) {
    metrics << nlohmann::json{{"type", "summary"}, {"ranks", comm.size()}, {"global_batch", o.global_batch},
                              {"steps", step}, {"seconds", result.seconds}, {"samples_per_s", result.samples_per_s},
                              {"compute_s", compute_s}, {"comm_exposed_s", comm_s}, {"data_wait_s", data_s},
                              {"parameter_checksum", result.parameter_checksum}, {"preempted", result.preempted},
                              {"eval_accuracy", result.eval.accuracy}}
                   .dump()
            << "\n";
    metrics.flush();
    require_written(metrics, "--metrics", o.metrics_path);
  }
  if (chatty) {
    std::printf("hpctrain: done: %lld steps in %.1f s, %.0f samples/s after %lld warm-up steps "
                "(rank 0: compute %.1f s, exposed communication %.1f s, data wait %.1f s)\n",
                static_cast<long long>(step), result.seconds, result.samples_per_s,
                static_cast<long long>(o.warmup_steps_for_throughput), compute_s, comm_s, data_s);
    std::printf("hpctrain: final parameter checksum xxh3:%016llx (%lld parameters)\n",
                static_cast<unsigned long long>(result.parameter_checksum),
                static_cast<long long>(result.parameter_count));
    std::fflush(stdout);
  }
  return result;
}

}  // namespace hpctrain::train
