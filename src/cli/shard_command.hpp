#pragma once
// `hpctrain data shard` (io/dataset_shards.hpp).
#include <CLI/CLI.hpp>

#include <string>

#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/io/dataset_shards.hpp"

namespace hpctrain::cli {

struct ShardArgs {
  io::ShardOptions options;
  std::string in, out;
};

/// Adds `shard` under `data`; returns it.
CLI::App* add_shard_command(CLI::App& data, ShardArgs& args);
/// Rank 0 writes (an error there ends the job through abort_job); the others wait.
int run_shard(const ShardArgs& args, coll::Communicator& comm);

}  // namespace hpctrain::cli
