// The `hpctrain` command: train, data import-idx, ckpt inspect/export, tune-collectives.
//
// Exit codes: 0 success; 1 error (one line on stderr, every rank ends through MPI_Abort);
// 2 usage error (bad flag or value, reported by rank 0); 75 preempted: a checkpoint was written
// after SIGUSR1/SIGTERM and the job should be requeued (resume with --resume auto).

#include <CLI/CLI.hpp>
#include <mpi.h>
#include <nlohmann/json.hpp>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/collectives/error.hpp"
#include "hpctrain/collectives/mpi_transport.hpp"
#include "hpctrain/collectives/transport_factory.hpp"
#include "hpctrain/core/environment.hpp"
#include "hpctrain/io/checkpoint.hpp"
#include "hpctrain/io/fashion_mnist_cache.hpp"
#include "hpctrain/io/idx_import.hpp"
#include "hpctrain/train/preemption.hpp"
#include "hpctrain/train/trainer.hpp"
#include "import_csv_command.hpp"
#include "ml_commands.hpp"
#include "tune_collectives.hpp"

namespace fs = std::filesystem;
using hpctrain::coll::Communicator;

namespace {

constexpr int kExitUsage = 2;

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

nlohmann::json model_config(const std::string& model) {
  if (model == "mlp" || model == "cnn") return nlohmann::json{{"name", model}};
  return parse_json_file("--model", model, "is neither a built-in model (mlp, cnn) nor a readable JSON file");
}

/// `--config FILE`: a JSON object whose keys are the long option names; its values become
/// arguments placed before the command line's, so the command line wins.
std::vector<std::string> config_arguments(const std::string& path) {
  const nlohmann::json j = parse_json_file("--config", path, "cannot be read");
  HPCTRAIN_REQUIRE(j.is_object(), "--config: '" + path + "' must hold a JSON object of option names and values");
  std::vector<std::string> args;
  for (auto& [key, value] : j.items()) {
    if (value.is_boolean()) {
      if (value.get<bool>()) args.push_back("--" + key);
      continue;
    }
    args.push_back("--" + key);
    args.push_back(value.is_string() ? value.get<std::string>() : value.dump());
  }
  return args;
}

struct TrainArgs {
  std::string model = "mlp";
  std::string config;
  std::string schedule = "constant";
  std::string lr_scaling = "none";
  std::string algo = "auto";
  double bucket_mb = 25.0;
  double first_bucket_mb = 0.25;
  bool keep_last = false;
  bool no_eval = false;
  int threads_per_rank = 0;
  hpctrain::train::TrainOptions options;
};

void add_train_options(CLI::App& train, TrainArgs& a) {
  auto& o = a.options;
  train.add_option("--model", a.model, "Model: mlp, cnn, or a JSON config file (see docs/compute-core.md)")
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
  train.add_option("--seed", o.seed, "Seed of parameter initialisation, data order and dropout")->capture_default_str();
  train.add_option("--optimizer", o.optimizer, "sgd or adamw")->capture_default_str();
  train.add_option("--lr", o.lr, "Learning rate (before --lr-scaling)")->capture_default_str();
  train.add_option("--momentum", o.momentum, "SGD momentum")->capture_default_str();
  train.add_flag("--nesterov", o.nesterov, "Nesterov momentum");
  train.add_option("--weight-decay", o.weight_decay, "Weight decay (L2 for sgd, decoupled for adamw)")
      ->capture_default_str();
  train.add_option("--clip-norm", o.clip_norm, "Clip gradients to this global L2 norm (0: off)")->capture_default_str();
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
  train.add_option("--algo", a.algo, "Gradient all-reduce algorithm: " + hpctrain::coll::algorithm_names())
      ->capture_default_str();
  train.add_option("--strategy", o.strategy,
                   "Gradient strategy: ddp (replicated), zero1 (optimiser state sharded over the ranks: "
                   "reduce-scatter, sharded step, all-gather), zero2 (gradients kept as the shard too). "
                   "zero2 cannot run with --deterministic; zero1/zero2 take no --algo but auto/ring "
                   "(docs/strategies.md)")
      ->capture_default_str();
  train.add_option("--grad-dtype", o.grad_dtype,
                   "Gradients on the wire: f32, bf16 or f16 (16-bit casts, f32 additions, f32 master "
                   "weights); not with --deterministic")
      ->capture_default_str();
  train.add_option("--bucket-mb", a.bucket_mb, "Gradient bucket size in MiB (the first bucket is smaller)")
      ->capture_default_str();
  train.add_option("--first-bucket-mb", a.first_bucket_mb, "Size of the first gradient bucket in MiB")
      ->capture_default_str();
  train.add_option("--prefetch", o.prefetch_depth, "Batches read ahead by the loader thread (bounds memory)")
      ->capture_default_str();
  train.add_option("--log-every", o.log_every, "Progress line every N steps (0: only at the end)")
      ->capture_default_str();
  train.add_option("--metrics", o.metrics_path, "Write JSON-lines metrics here (rank 0)");
  train.add_option("--timeline", o.timeline_path,
                   "Write a Chrome-trace JSON of compute and all-reduce spans of every rank (open in "
                   "chrome://tracing or ui.perfetto.dev)");
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
                 "fixed micro-shards, exact fixed-point gradient sum, BLAS on one thread (docs/deterministic.md)");
  train.add_option("--micro-shard", o.micro_shard,
                   "--deterministic: samples per micro-shard (the unit of work a rank computes on its own)")
      ->capture_default_str();
  train.add_option("--threads-per-rank", a.threads_per_rank,
                   "Compute threads (OpenBLAS, oneDNN) per rank; 0: HPCTRAIN_THREADS_PER_RANK, OMP_NUM_THREADS, "
                   "the cores the launcher bound the rank to, or cores / ranks on the node (docs/compute-core.md)")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  train.add_flag("--quiet", o.quiet, "Only errors");
  // Counts and sizes: CLI11 would wrap -1 into an unsigned option (--prefetch -1: 2^64 - 1).
  const CLI::Validator non_negative(
      [](std::string& value) { return value.rfind('-', 0) == 0 ? "must not be negative, got " + value : std::string(); },
      "NON-NEGATIVE");
  for (const char* name : {"--epochs", "--max-steps", "--global-batch", "--accumulate", "--seed", "--warmup-steps",
                           "--step-size", "--lr-reference-batch", "--prefetch", "--log-every", "--timeline-steps",
                           "--checkpoint-every", "--checkpoint-every-s", "--keep", "--micro-shard"}) {
    train.get_option(name)->check(non_negative);
  }
}

int run_train(TrainArgs& a, Communicator& comm) {
  auto& o = a.options;
  o.model = model_config(a.model);
  o.schedule.kind = hpctrain::train::parse_schedule(a.schedule);
  o.lr_scaling = hpctrain::train::parse_lr_scaling(a.lr_scaling);
  o.parallel.algorithm = hpctrain::coll::parse_algorithm(a.algo, "--algo");
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
  const auto result = hpctrain::train::run_training(o, comm);
  return result.preempted ? hpctrain::train::kExitRequeue : 0;
}

int run_ckpt_inspect(const std::string& dir, Communicator& comm) {
  if (comm.rank() != 0) return 0;
  std::string step_dir = dir;
  // A step directory (by its manifest, or by its name when the manifest is what is missing) is
  // verified as it is; any other directory is a --checkpoint-dir: its newest valid step.
  const std::string base = std::filesystem::path(dir).lexically_normal().filename().string().empty()
                               ? std::filesystem::path(dir).lexically_normal().parent_path().filename().string()
                               : std::filesystem::path(dir).lexically_normal().filename().string();
  if (!std::filesystem::exists(std::filesystem::path(dir) / "manifest.json") && base.rfind("step-", 0) != 0) {
    std::vector<hpctrain::io::CheckpointProblem> skipped;
    step_dir = hpctrain::io::find_latest_checkpoint(dir, &skipped);
    for (const auto& p : skipped) std::printf("INVALID %s: %s\n", p.path.c_str(), p.what.c_str());
    HPCTRAIN_REQUIRE(!step_dir.empty(), "'" + dir + "' holds no valid checkpoint");
  }
  const auto problems = hpctrain::io::verify_checkpoint(step_dir);
  if (problems.empty()) {
    const auto m = hpctrain::io::read_manifest(step_dir);
    std::printf("%s\n", m.dump(2).c_str());
    const std::string unprotected = hpctrain::io::manifest_warning(m);
    if (!unprotected.empty()) std::printf("WARNING %s: %s\n", step_dir.c_str(), unprotected.c_str());
  }
  for (const auto& p : problems) std::printf("INVALID %s: %s\n", p.path.c_str(), p.what.c_str());
  std::printf("%s: %s\n", step_dir.c_str(), problems.empty() ? "all shard sizes and checksums verify" : "INVALID");
  return problems.empty() ? 0 : 1;
}

struct ImportArgs {
  std::string images, labels, out;
  std::int64_t limit = 0;
  std::int32_t classes = 0;
  bool float32 = false;
  int compression = 0;
  bool fashion_names = false;
};

int run_import(const ImportArgs& a, Communicator& comm) {
  hpctrain::io::IdxImportOptions options =
      a.fashion_names ? hpctrain::io::IdxImportOptions::fashion_mnist() : hpctrain::io::IdxImportOptions{};
  options.limit = a.limit;
  if (a.classes) options.classes = a.classes;
  options.sample_type = a.float32 ? hpctrain::io::SampleType::float32 : hpctrain::io::SampleType::uint8;
  options.compression_level = a.compression;
  int failed = 0;
  std::string why;
  if (comm.rank() == 0) {
    try {
      const auto r = hpctrain::io::import_idx(a.images, a.labels, a.out, options);
      std::printf("hpctrain: wrote %s: %lld samples, %d classes\n", a.out.c_str(), static_cast<long long>(r.count),
                  r.classes);
    } catch (const std::exception& e) {
      failed = 1;
      why = e.what();
    }
  }
  comm.allreduce(&failed, 1, hpctrain::coll::ReduceOp::max);
  if (failed && comm.rank() == 0) throw std::runtime_error(why);
  if (failed) throw std::runtime_error("import failed on rank 0");
  return 0;
}

/// "" when the leading words of `args` name subcommands of `app` (as deep as they go), else an
/// error naming the first unknown one and the valid ones (CLI11 says only "A subcommand is
/// required").
std::string unknown_subcommand(const CLI::App& app, const std::vector<std::string>& args) {
  const CLI::App* level = &app;
  for (const std::string& word : args) {
    const auto subs = level->get_subcommands([](const CLI::App*) { return true; });
    if (word.empty() || word[0] == '-' || subs.empty()) return "";
    const CLI::App* next = nullptr;
    std::string names;
    for (const CLI::App* sub : subs) {
      if (sub->get_name() == word) next = sub;
      names += (names.empty() ? "" : ", ") + sub->get_name();
    }
    if (next == nullptr) {
      const std::string where = level == &app ? "hpctrain" : "hpctrain " + level->get_name();
      return "unknown subcommand '" + word + "' of '" + where + "' (expected one of: " + names + ")";
    }
    level = next;
  }
  return "";
}

/// `hpctrain data import-idx` (the `data` group itself is the caller's).
CLI::App* add_import_idx_command(CLI::App& data, ImportArgs& import_args) {
  CLI::App* import = data.add_subcommand("import-idx", "Convert IDX files (gzip or plain) into an hpctrain HDF5 data set");
  import->add_option("--images", import_args.images, "IDX image file (unsigned byte, N x H x W or N x F)")->required();
  import->add_option("--labels", import_args.labels, "IDX label file (unsigned byte, N)")->required();
  import->add_option("--out", import_args.out, "Output HDF5 file (written under a temporary name, then renamed)")
      ->required();
  import->add_option("--limit", import_args.limit, "Import only the first N samples (0: all)")->capture_default_str();
  import->add_option("--classes", import_args.classes, "Number of classes (0: largest label + 1)")->capture_default_str();
  import->add_flag("--float32", import_args.float32, "Store samples as float32 in [0,1] instead of uint8");
  import->add_option("--compression", import_args.compression, "gzip level 0-9 (0: none, fastest to read)")
      ->capture_default_str();
  import->add_flag("--fashion-mnist", import_args.fashion_names, "Store Fashion-MNIST's class names");
  return import;
}

/// `hpctrain ckpt inspect DIR` and `hpctrain ckpt export DIR OUT`.
struct CkptCommands {
  std::string dir, export_out;
  CLI::App* inspect = nullptr;
  CLI::App* exporter = nullptr;
};

void add_ckpt_commands(CLI::App& app, CkptCommands& c) {
  CLI::App* ckpt = app.add_subcommand("ckpt", "Checkpoint tools");
  ckpt->require_subcommand(1);
  c.inspect = ckpt->add_subcommand("inspect", "Print a checkpoint's manifest and verify every shard's size and checksum "
                                              "(a step directory, or a checkpoint directory: its newest valid step)");
  c.inspect->add_option("DIR", c.dir, "step-<N> directory or --checkpoint-dir")->required();
  c.exporter = ckpt->add_subcommand("export", "Write the model parameters of a checkpoint into one HDF5 file");
  c.exporter->add_option("DIR", c.dir, "step-<N> directory")->required();
  c.exporter->add_option("OUT", c.export_out, "output .h5 file")->required();
}

/// --config FILE: its values go right after `train`, before the command line's own arguments
/// (which therefore override them).
void insert_config_arguments(std::vector<std::string>& args) {
  for (std::size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == "--config") {
      auto extra = config_arguments(args[i + 1]);
      const auto at = std::find(args.begin(), args.end(), "train");
      if (at != args.end()) args.insert(at + 1, extra.begin(), extra.end());
      return;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  // A write beyond the file-size limit (`ulimit -f`, a quota) then fails with EFBIG and is
  // reported naming the file, instead of SIGXFSZ killing the rank with no message.
  std::signal(SIGXFSZ, SIG_IGN);
  hpctrain::choose_openblas_kernels(argv);  // may re-execute: before anything else
  hpctrain::Environment env(argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);

  CLI::App app{"hpctrain: data-parallel training on MPI machines.\n"
               "Launch with `mpirun -n P hpctrain ...` or `srun hpctrain ...`; every rank runs the same command."};
  app.require_subcommand(1);
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);

  TrainArgs train_args;
  CLI::App* train = app.add_subcommand("train", "Train a model data-parallel over all ranks");
  add_train_options(*train, train_args);

  ImportArgs import_args;
  CLI::App* data = app.add_subcommand("data", "Data set tools");
  data->require_subcommand(1);
  CLI::App* import = add_import_idx_command(*data, import_args);

  CkptCommands ckpt;
  add_ckpt_commands(app, ckpt);

  hpctrain::cli::TuneArgs tune_args;
  CLI::App* tune = app.add_subcommand(
      "tune-collectives",
      "Measure the all-reduce cost model's parameters (alpha, beta, gamma, shared-memory copy) and write a "
      "tuning file for HPCTRAIN_TUNING_FILE; print predicted times per algorithm up to thousands of nodes");
  hpctrain::cli::add_tune_options(*tune, tune_args);

  hpctrain::cli::ImportCsvArgs csv_args;
  CLI::App* import_csv = hpctrain::cli::add_import_csv_command(*data, csv_args);

  hpctrain::cli::MlArgs ml_args;
  CLI::App* ml = hpctrain::cli::add_ml_commands(app, ml_args);

  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    insert_config_arguments(args);
  } catch (const std::exception& e) {
    if (rank == 0) std::fprintf(stderr, "hpctrain: error: %s\n", e.what());
    return kExitUsage;
  }
  if (const std::string unknown = unknown_subcommand(app, args); !unknown.empty()) {
    if (rank == 0) std::fprintf(stderr, "hpctrain: error: %s\nRun with --help for more information.\n", unknown.c_str());
    return kExitUsage;
  }
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 parses a reversed vector
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    // Every rank parses the same arguments, so every rank leaves here; rank 0 speaks.
    if (rank == 0) {
      const int code = app.exit(e);
      return code == 0 ? 0 : kExitUsage;
    }
    return e.get_exit_code() == 0 ? 0 : kExitUsage;
  }

  // Declared outside the try: on an error the catch prints and aborts the job while the
  // communicator is still alive, instead of its destructor first waiting for peers that are
  // still training (a collective MPI_Win_free) or stopped.
  std::optional<Communicator> world;
  try {
    if (*tune) return hpctrain::cli::run_tune_collectives(tune_args, MPI_COMM_WORLD);
    Communicator& comm = world.emplace(hpctrain::coll::make_default_transport(MPI_COMM_WORLD));  // HPCTRAIN_TRANSPORT
    if (*train) return run_train(train_args, comm);
    if (*import) return run_import(import_args, comm);
    if (*ckpt.inspect) return run_ckpt_inspect(ckpt.dir, comm);
    if (*import_csv) return hpctrain::cli::run_import_csv(csv_args, comm);
    if (*ml) return hpctrain::cli::run_ml(ml_args, comm);
    if (*ckpt.exporter) {
      if (comm.rank() == 0) {
        const auto n = hpctrain::io::export_checkpoint(ckpt.dir, ckpt.export_out);
        std::printf("hpctrain: wrote %zu tensors to %s\n", n, ckpt.export_out.c_str());
      }
      comm.barrier();
      return 0;
    }
  } catch (const std::exception& e) {
    hpctrain::abort_job(e, 1);
  }
  return 0;
}
