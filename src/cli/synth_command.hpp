#pragma once
// `hpctrain data synth` (io/synthetic_dataset.hpp).
#include <CLI/CLI.hpp>

#include <string>

#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/io/synthetic_dataset.hpp"

namespace hpctrain::cli {

struct SynthArgs {
  io::SynthOptions options;
  std::string shape = "1,28,28", dtype = "uint8", out;
};

/// Adds `synth` under `data`; returns it.
CLI::App* add_synth_command(CLI::App& data, SynthArgs& args);
/// Rank 0 writes (an error there ends the job through abort_job); the others wait.
int run_synth(SynthArgs& args, coll::Communicator& comm);

}  // namespace hpctrain::cli
