#pragma once
// `hpctrain tune-collectives`: measures the all-reduce cost model's parameters (tuning.hpp) on
// this machine and writes a tuning file; predicts per-algorithm times at scale from one.

#include <CLI/CLI.hpp>
#include <mpi.h>

#include <string>

namespace hpctrain::cli {

struct TuneArgs {
  std::string output = "tuning.json";
  std::string input;
  bool predict_only = false;
  bool quick = false;
  int reps = 0;  // 0: 50 (quick: 10)
  int predict_ranks_per_node = 0;
  int predict_nodes_max = 4096;
  std::string predict_sizes = "8,64K,1M,64M";
};

/// Registers the subcommand's options on `app` (the `tune-collectives` subcommand).
void add_tune_options(CLI::App& app, TuneArgs& args);

/// Runs the subcommand over the ranks of `comm` (collective unless --predict-only). Returns the
/// process exit code; throws hpctrain::Error on bad input or a failed measurement.
int run_tune_collectives(const TuneArgs& args, MPI_Comm comm);

}  // namespace hpctrain::cli
