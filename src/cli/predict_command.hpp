#pragma once
// `hpctrain predict` (batch inference into an HDF5 file) and `hpctrain serve` (HTTP), both from
// a checkpoint; the library is src/serve (docs/serving.md).
#include <CLI/CLI.hpp>

#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/serve/batch_prediction.hpp"
#include "hpctrain/serve/serve_options.hpp"

namespace hpctrain::cli {

struct InferenceArgs {
  CLI::App* predict = nullptr;
  CLI::App* serve = nullptr;
  hpctrain::serve::PredictOptions predict_options;
  hpctrain::serve::ServeOptions serve_options;
  int threads_per_rank = 0;
};

/// Adds `predict` and `serve` to `app`.
void add_inference_commands(CLI::App& app, InferenceArgs& args);
/// Whether one of them was chosen on the command line.
bool inference_chosen(const InferenceArgs& args);
/// Runs the chosen one on every rank; returns the exit code.
int run_inference(const InferenceArgs& args, coll::Communicator& comm);

}  // namespace hpctrain::cli
