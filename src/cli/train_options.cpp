#include "train_options.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "hpctrain/base/error.hpp"
#include "hpctrain/core/environment.hpp"
#include "hpctrain/core/tensor.hpp"
#include "hpctrain/io/fashion_mnist_cache.hpp"
#include "hpctrain/models/registry.hpp"

namespace fs = std::filesystem;

namespace hpctrain::cli {

/// The JSON in the regular file `path`; errors name `option` and the file (a directory opens
/// as a stream, then fails to read with only "basic_filebuf::underflow").
nlohmann::json parse_json_file(const std::string& option, const std::string& path, const std::string& unreadable) {
  std::error_code ec;
  HPCTRAIN_REQUIRE(!fs::is_directory(path, ec), option + ": '" + path + "' is a directory, not a JSON file");
  std::ifstream in(path);
  HPCTRAIN_REQUIRE(in.good(), option + ": '" + path + "' " + unreadable);
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    HPCTRAIN_FAIL(option + ": '" + path + "' is not valid JSON: " + e.what());
  } catch (const std::exception& e) {
    HPCTRAIN_FAIL(option + ": cannot read '" + path + "': " + e.what());
  }
}

namespace {

nlohmann::json model_config(const std::string& model) {
  const std::vector<std::string> names = models::registered_models<float>();
  if (std::find(names.begin(), names.end(), model) != names.end()) return nlohmann::json{{"name", model}};
  std::string known;
  for (const std::string& n : names) known += (known.empty() ? "" : ", ") + n;
  return parse_json_file("--model", model, "is neither a registered model (" + known + ") nor a readable JSON file");
}

}  // namespace

std::vector<std::string> json_to_arguments(const nlohmann::json& j) {
  std::vector<std::string> args;
  for (auto& [key, value] : j.items()) {
    const std::string flag = "--" + option_name(key);
    if (value.is_boolean()) {
      if (value.get<bool>()) args.push_back(flag);
      continue;
    }
    args.push_back(flag);
    args.push_back(value.is_string() ? value.get<std::string>() : value.dump());
  }
  return args;
}

std::vector<std::string> config_arguments(const std::string& path) {
  const nlohmann::json j = parse_json_file("--config", path, "cannot be read");
  HPCTRAIN_REQUIRE(j.is_object(), "--config: '" + path + "' must hold a JSON object of option names and values");
  return json_to_arguments(j);
}

std::string option_name(const std::string& key) {
  std::string name = key;
  std::replace(name.begin(), name.end(), '_', '-');
  return name;
}

namespace {

/// Model, data, batches, optimiser and learning-rate schedule.
void add_model_data_optimizer_options(CLI::App& train, TrainArgs& a) {
  auto& o = a.options;
  train.add_option("--model", a.model, "Model: mlp, cnn, resnet, transformer, or a JSON config file (docs/models.md)")
      ->capture_default_str();
  train.add_option("--data", o.data,
                   "Training data set (hpctrain HDF5 format; `hpctrain data import-idx` makes one). "
                   "Default: Fashion-MNIST, imported from Debian's dataset-fashion-mnist into "
                   "$HPCTRAIN_DATA_DIR (or ~/.cache/hpctrain) on first use");
  train.add_option("--eval-data", o.eval_data,
                   "Test split evaluated after every epoch (default with the default data: "
                   "Fashion-MNIST's test split)");
  train.add_flag("--no-eval", a.no_eval, "Skip evaluation");
  train.add_option("--epochs", o.epochs, "Passes over the training data")->capture_default_str();
  train.add_option("--max-steps", o.max_steps, "Stop after this many optimiser steps (0: no limit)")
      ->capture_default_str();
  train.add_option("--global-batch", o.global_batch,
                   "Samples per step over ALL ranks (split evenly; results do not depend on the rank count)")
      ->capture_default_str();
  train.add_option("--accumulate", o.accumulate,
                   "Micro-batches (of --global-batch each) accumulated per optimiser step without communication")
      ->capture_default_str();
  train.add_flag("--keep-last", a.keep_last, "Keep the last partial batch of an epoch (default: drop it)");
  train.add_option("--shuffle-block", o.shuffle_block,
                   "Shuffle each epoch in blocks of this many consecutive samples (blocks in random order, each "
                   "block's samples together) instead of sample by sample. For data streamed from disk: a batch "
                   "then reads B/S runs of S samples instead of B scattered ones. Assumes the file's own order is "
                   "random (docs/data.md). Same bits at any rank count, streamed or in memory")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 30))
      ->capture_default_str();
  train.add_option("--seed", o.seed, "Seed of parameter initialisation, data order and dropout")->capture_default_str();
  train.add_option("--optimizer", o.optimizer, "sgd or adamw")->capture_default_str();
  train.add_option("--lr", o.lr, "Learning rate (before --lr-scaling)")->capture_default_str();
  train.add_option("--momentum", o.momentum, "SGD momentum")->capture_default_str();
  train.add_flag("--nesterov", o.nesterov, "Nesterov momentum");
  train.add_option("--weight-decay", o.weight_decay, "Weight decay (L2 for sgd, decoupled for adamw)")
      ->capture_default_str();
  train.add_option("--clip-norm", o.clip_norm, "Clip gradients to this global L2 norm (0: off)")->capture_default_str();
  train.add_option("--skip-nonfinite-steps", o.skip_nonfinite_steps,
                   "Skip up to this many optimiser steps whose loss or summed gradient holds a NaN or an infinity: "
                   "the update is not applied (parameters, optimiser state and batch-norm statistics stay as they "
                   "were; the step still counts for the schedule), each one is printed and recorded in --metrics; "
                   "one more stops the run. 0: the first one stops it")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 40))
      ->capture_default_str();
  train.add_option("--schedule", a.schedule, "LR schedule: constant, step or cosine")->capture_default_str();
  train.add_option("--warmup-steps", o.schedule.warmup_steps, "Linear LR warm-up steps")->capture_default_str();
  train.add_option("--step-size", o.schedule.step_size, "step schedule: steps between decays")->capture_default_str();
  train.add_option("--gamma", o.schedule.gamma, "step schedule: decay factor")->capture_default_str();
  train.add_option("--min-lr", o.schedule.min_lr, "cosine schedule: final LR")->capture_default_str();
  train.add_option("--lr-scaling", a.lr_scaling,
                   "Scale --lr with the global batch relative to --lr-reference-batch: none, linear, sqrt")
      ->capture_default_str();
  train.add_option("--lr-reference-batch", o.lr_reference_batch, "Batch size --lr was tuned for")
      ->capture_default_str();
}

/// How gradients are combined over the ranks: algorithm, strategy, wire type, buckets.
void add_gradient_options(CLI::App& train, TrainArgs& a) {
  auto& o = a.options;
  train.add_option("--algo", a.algo,
                   "Gradient all-reduce algorithm (ddp): " + hpctrain::coll::algorithm_names() +
                       "; under zero1/zero2 the reduce-scatter and all-gather algorithm: auto, ring, "
                       "rabenseifner, shm or hierarchical")
      ->capture_default_str();
  train.add_option("--strategy", o.strategy,
                   "Gradient strategy: ddp (replicated), zero1 (optimiser state sharded over the ranks: "
                   "reduce-scatter, sharded step, all-gather), zero2 (gradients kept as the shard too). "
                   "zero2 cannot run with --deterministic; zero1/zero2 refuse --algo tree, recursive_doubling "
                   "and mpi (docs/strategies.md)")
      ->capture_default_str();
  train.add_option("--grad-dtype", o.grad_dtype,
                   "Gradients on the wire: f32, bf16 or f16 (16-bit casts, f32 additions, f32 master "
                   "weights); not with --deterministic")
      ->capture_default_str();
  train.add_flag("--grad-error-feedback", o.grad_error_feedback,
                 "With --grad-dtype bf16|f16: each rank keeps the rounding error of its gradient cast and "
                 "adds it to the next step's (error feedback; 4 bytes per parameter; not checkpointed)");
  train.add_option("--bucket-mb", a.bucket_mb, "Gradient bucket size in MiB (the first bucket is smaller)")
      ->capture_default_str();
  train.add_option("--first-bucket-mb", a.first_bucket_mb, "Size of the first gradient bucket in MiB")
      ->capture_default_str();
}

/// Loader, progress and metrics output, checkpoints, --config, determinism and threads.
void add_output_checkpoint_run_options(CLI::App& train, TrainArgs& a) {
  auto& o = a.options;
  train.add_option("--prefetch", o.prefetch_depth,
                   "Batches read ahead from the file by the loader thread (bounds memory; at least 1). Data "
                   "held in memory (--data-in-memory-mib) is read in the training loop instead")
      ->capture_default_str();
  train.add_option("--data-in-memory-mib", o.data_in_memory_mib,
                   "Copy the training split into memory when its samples take at most this many MiB per rank "
                   "(as float32; Fashion-MNIST: 180); 0: stream every batch from the file. Same results either way")
      ->capture_default_str();
  train.add_option("--log-every", o.log_every, "Progress line every N steps (0: only at the end)")
      ->capture_default_str();
  train.add_option("--metrics", o.metrics_path, "Write JSON-lines metrics here (rank 0)");
  train.add_option("--timeline", o.timeline_path,
                   "Write a Chrome-trace JSON of compute and all-reduce spans of every rank (open in "
                   "chrome://tracing or ui.perfetto.dev)");
  train.add_option("--tensorboard", o.tensorboard_dir,
                   "Write TensorBoard event files (events.out.tfevents.*) into this directory (rank 0): "
                   "train/loss, train/lr, train/samples_per_s, time/compute_s, time/exposed_comm_s, eval/loss, "
                   "eval/accuracy, the same values as --metrics (docs/tensorboard.md)");
  train.add_option("--timeline-steps", o.timeline_steps, "Steps recorded in the timeline")->capture_default_str();
  train.add_option("--normalize-mean", o.normalize_mean, "Input normalisation: mean")->capture_default_str();
  train.add_option("--normalize-std", o.normalize_std, "Input normalisation: standard deviation")
      ->capture_default_str();
  train.add_option("--checkpoint-dir", o.checkpoint_dir,
                   "Write sharded HDF5 checkpoints here (step-<N>/ directories, `latest`); also arms "
                   "preemption handling: on SIGUSR1/SIGTERM all ranks checkpoint at the next step and exit 75");
  train.add_option("--checkpoint-every", o.checkpoint_every, "Checkpoint every N optimiser steps (0: off)")
      ->capture_default_str();
  train.add_option("--checkpoint-every-s", o.checkpoint_every_s, "Checkpoint every T seconds (0: off)")
      ->capture_default_str();
  train.add_option("--keep", o.keep, "Newest checkpoints kept (older ones pruned after a new commit)")
      ->capture_default_str();
  train.add_option("--resume", o.resume,
                   "none, auto (newest valid checkpoint in --checkpoint-dir; damaged ones are reported and "
                   "skipped) or a step directory. Any rank count can resume any checkpoint")
      ->capture_default_str();
  train.add_flag("--overwrite-checkpoints", o.overwrite_checkpoints,
                 "Without --resume: remove the checkpoints of an earlier run from --checkpoint-dir and start "
                 "afresh (without this flag such a run is refused)");
  train.add_option("--config", a.config, "JSON file of option names and values; the command line overrides it");
  train.add_flag("--deterministic", o.deterministic,
                 "Bitwise-identical parameters at any rank count and across resumes at another rank count: "
                 "fixed micro-shards, gradients summed over a fixed tree on the micro-shard index, OpenBLAS and oneDNN on one "
                 "thread (the other kernels keep --threads-per-rank; docs/deterministic.md)");
  train.add_flag("--sync-bn", o.sync_bn,
                 "Batch norm (resnet) normalises with the global batch's statistics (two small all-reduces per "
                 "batch-norm layer per step) instead of each rank's own samples; not with --deterministic "
                 "(docs/models.md)");
  train.add_option("--micro-shard", o.micro_shard,
                   "--deterministic: samples per micro-shard (the unit of work a rank computes on its own). "
                   "The bytes depend on it, never on the rank count; ranks beyond global batch / micro-shard "
                   "idle. Larger is faster (at 16 on 2 cores, "
                   "deterministic training cost the MLP about 3 % at 1 rank x 2 threads and 1 % at 2 x 1, the CNN "
                   "1-3 % at 1 x 2 and 3-5 % at 2 x 1, the ResNet 0-3 %, the transformer about 8 % at 1 x 2 and at 2 x 1): global batch / the most ranks the run will use is the fastest that keeps "
                   "every rank busy (docs/deterministic.md)")
      ->capture_default_str();
  train.add_option("--threads-per-rank", a.threads_per_rank,
                   "Compute threads (OpenBLAS, oneDNN, libxsmm) per rank; 0: HPCTRAIN_THREADS_PER_RANK, OMP_NUM_THREADS, "
                   "the cores the launcher bound the rank to, or cores / ranks on the node (docs/compute-core.md)")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  train.add_flag("--quiet", o.quiet, "Only errors");
  // Counts and sizes: CLI11 would wrap -1 into an unsigned option (--prefetch -1: 2^64 - 1).
  const CLI::Validator non_negative(
      [](std::string& value) { return value.rfind('-', 0) == 0 ? "must not be negative, got " + value : std::string(); },
      "NON-NEGATIVE");
  for (const char* name : {"--epochs", "--max-steps", "--global-batch", "--accumulate", "--seed", "--warmup-steps",
                           "--step-size", "--lr-reference-batch", "--prefetch", "--data-in-memory-mib", "--log-every", "--timeline-steps",
                           "--checkpoint-every", "--checkpoint-every-s", "--keep", "--micro-shard"}) {
    train.get_option(name)->check(non_negative);
  }
}

}  // namespace

void add_train_options(CLI::App& train, TrainArgs& a) {
  // In this order: --help lists the flags as registered.
  add_model_data_optimizer_options(train, a);
  add_gradient_options(train, a);
  add_output_checkpoint_run_options(train, a);
}

hpctrain::train::TrainOptions resolve_train_options(TrainArgs& a, Communicator& comm) {
  auto o = a.options;
  o.model = model_config(a.model);
  o.schedule.kind = hpctrain::train::parse_schedule(a.schedule);
  o.lr_scaling = hpctrain::train::parse_lr_scaling(a.lr_scaling);
  o.parallel.algorithm = hpctrain::coll::parse_algorithm(a.algo, "--algo");
  // NCCL all-reduces device memory; a trainer built on a host Kokkos keeps its gradients on the
  // host, where the first all-reduce would refuse them: say so before any work.
  constexpr bool host_gradients = Kokkos::SpaceAccessibility<Kokkos::HostSpace, hpctrain::core::MemSpace>::accessible;
  HPCTRAIN_REQUIRE(o.parallel.algorithm != hpctrain::coll::Algorithm::nccl || !host_gradients,
                   "--algo nccl: NCCL reduces GPU memory, and this build's gradients are host memory (its Kokkos "
                   "has no GPU back end); use auto, ring, shm or another host algorithm (docs/collectives.md)");
  HPCTRAIN_REQUIRE(a.bucket_mb > 0 && a.first_bucket_mb > 0, "--bucket-mb and --first-bucket-mb must be positive");
  o.parallel.bucket_bytes = static_cast<std::size_t>(a.bucket_mb * 1048576.0);
  o.parallel.first_bucket_bytes = static_cast<std::size_t>(a.first_bucket_mb * 1048576.0);
  o.drop_last = !a.keep_last;
  if (a.threads_per_rank > 0) hpctrain::set_threads_per_rank(a.threads_per_rank, "--threads-per-rank");
  if (o.data.empty()) {
    o.data = hpctrain::io::ensure_fashion_mnist("train", comm);
    if (o.eval_data.empty() && !a.no_eval) o.eval_data = hpctrain::io::ensure_fashion_mnist("test", comm);
  }
  if (a.no_eval) o.eval_data.clear();
  return o;
}

}  // namespace hpctrain::cli
