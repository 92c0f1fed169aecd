// The `hpctrain` command: train, sweep, data import-idx/import-csv/synth/shard, ckpt inspect/export, tune-collectives,
// ml, predict, serve.
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

#include "hpctrain/base/error.hpp"
#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/collectives/mpi_transport.hpp"
#include "hpctrain/collectives/transport_factory.hpp"
#include "hpctrain/core/environment.hpp"
#include "hpctrain/io/checkpoint.hpp"
#include "hpctrain/io/fashion_mnist_cache.hpp"
#include "hpctrain/io/idx_import.hpp"
#include "hpctrain/train/preemption.hpp"
#include "hpctrain/train/trainer.hpp"
#include "import_csv_command.hpp"
#include "shard_command.hpp"
#include "synth_command.hpp"
#include "ml_commands.hpp"
#include "predict_command.hpp"
#include "sweep_command.hpp"
#include "train_options.hpp"
#include "tune_collectives.hpp"

namespace fs = std::filesystem;
using hpctrain::coll::Communicator;
using hpctrain::cli::add_train_options;  // train_options.hpp: the train flags and their mapping
using hpctrain::cli::config_arguments;
using hpctrain::cli::resolve_train_options;
using hpctrain::cli::TrainArgs;

namespace {

constexpr int kExitUsage = 2;

int run_train(TrainArgs& a, Communicator& comm) {
  const auto result = hpctrain::train::run_training(resolve_train_options(a, comm), comm);
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
  hpctrain::cli::SynthArgs synth_args;
  CLI::App* synth = hpctrain::cli::add_synth_command(*data, synth_args);
  hpctrain::cli::ShardArgs shard_args;
  CLI::App* shard = hpctrain::cli::add_shard_command(*data, shard_args);

  hpctrain::cli::MlArgs ml_args;
  CLI::App* ml = hpctrain::cli::add_ml_commands(app, ml_args);

  hpctrain::cli::InferenceArgs inference_args;
  hpctrain::cli::add_inference_commands(app, inference_args);
  hpctrain::cli::SweepArgs sweep_args;
  CLI::App* sweep = hpctrain::cli::add_sweep_command(app, sweep_args);

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
    if (*synth) return hpctrain::cli::run_synth(synth_args, comm);
    if (*shard) return hpctrain::cli::run_shard(shard_args, comm);
    if (*ml) return hpctrain::cli::run_ml(ml_args, comm);
    if (hpctrain::cli::inference_chosen(inference_args)) return hpctrain::cli::run_inference(inference_args, comm);
    if (*sweep) return hpctrain::cli::run_sweep_command(sweep_args, comm);
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
