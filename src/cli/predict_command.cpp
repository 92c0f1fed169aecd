#include "predict_command.hpp"

#include <mpi.h>

#include <cstdio>
#include <string>

#include "hpctrain/core/environment.hpp"
#include "hpctrain/serve/http_service.hpp"
#include "serve_command.hpp"

namespace hpctrain::cli {

namespace {

void add_threads_option(CLI::App& cmd, InferenceArgs& a, const std::string& more) {
  cmd.add_option("--threads-per-rank", a.threads_per_rank,
                 "Compute threads (OpenBLAS, oneDNN, libxsmm) per rank; 0: HPCTRAIN_THREADS_PER_RANK, OMP_NUM_THREADS, the "
                 "launcher's binding, or cores / ranks on the node" + more)
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
}

void add_predict_command(CLI::App& app, InferenceArgs& a) {
  auto& o = a.predict_options;
  a.predict = app.add_subcommand(
      "predict", "Batch inference from a checkpoint: every rank runs whole batches of the input; writes "
                 "/predictions and /probabilities (docs/serving.md)");
  a.predict->add_option("--checkpoint", o.checkpoint,
                        "A checkpoint directory (its newest valid step: `latest` if it verifies) or one step-<N> "
                        "directory; a damaged checkpoint is refused by name")
      ->required();
  a.predict->add_option("--data", o.data, "Input: an hpctrain HDF5 data set (`hpctrain data import-idx`)")->required();
  a.predict->add_option("--out", o.out,
                        "Output HDF5 file: /predictions (int32, N), /probabilities (float32, N x classes) and "
                        "provenance attributes; written under a temporary name, then renamed")
      ->required();
  a.predict->add_option("--batch", o.batch, "Samples per forward pass (the unit of work a rank takes)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 24))
      ->capture_default_str();
  add_threads_option(*a.predict, a, ". Output bytes do not depend on the rank count (docs/serving.md)");
}

int run_predict(const InferenceArgs& a, coll::Communicator& comm) {
  const auto s = serve::run_batch_prediction(comm, MPI_COMM_WORLD, a.predict_options);
  if (comm.rank() == 0) {
    std::printf("hpctrain: predicted %lld samples from %s (step %lld) on %d ranks: accuracy %.4f, %.0f samples/s\n",
                static_cast<long long>(s.samples), s.step_dir.c_str(), static_cast<long long>(s.step), comm.size(),
                s.accuracy, s.samples_per_s);
    std::printf("hpctrain: wrote %s\n", a.predict_options.out.c_str());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

void add_inference_commands(CLI::App& app, InferenceArgs& a) {
  add_predict_command(app, a);
  a.serve = add_serve_command(app, a.serve_options);
  add_threads_option(*a.serve, a, "");
}

bool inference_chosen(const InferenceArgs& a) { return (a.predict && *a.predict) || (a.serve && *a.serve); }

int run_inference(const InferenceArgs& a, coll::Communicator& comm) {
  if (a.threads_per_rank > 0) hpctrain::set_threads_per_rank(a.threads_per_rank, "--threads-per-rank");
  if (*a.predict) return run_predict(a, comm);
  return serve::run_http_service(comm, MPI_COMM_WORLD, a.serve_options);
}

}  // namespace hpctrain::cli
