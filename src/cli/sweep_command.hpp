#pragma once
// `hpctrain sweep`: its flags and the bridge from SPACE.json's option names to the trainer's
// options (the same mapping as `hpctrain train` and --config: train_options.hpp).

#include <CLI/CLI.hpp>

#include <string>

#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/sweep/sweep_options.hpp"

namespace hpctrain::cli {

struct SweepArgs {
  sweep::SweepOptions options;
  std::string scheduler = "none";
  std::string mode;  ///< empty: max for test_accuracy, min for test_loss
  std::string perturb = "0.8,1.2";
  CLI::Option* seed = nullptr;  ///< whether --seed was given (it overrides SPACE.json's)
};

/// Adds `hpctrain sweep` and its flags to `app`.
CLI::App* add_sweep_command(CLI::App& app, SweepArgs& args);

/// Runs the sweep (collective over `world`); returns the exit status (0, or 75 when preempted).
int run_sweep_command(SweepArgs& args, coll::Communicator& world);

}  // namespace hpctrain::cli
