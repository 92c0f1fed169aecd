#pragma once
// `hpctrain train`'s options: the CLI11 flags, their mapping onto train::TrainOptions, and the
// JSON form of them (`--config FILE`, a sweep's SPACE.json `base` and `search`). One mapping
// for every place that turns option names into a training run.

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/train/trainer.hpp"

namespace hpctrain::cli {

using coll::Communicator;

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
  hpctrain::train::TrainOptions options;  ///< filled by CLI11; resolved by resolve_train_options
};

/// Adds every `hpctrain train` flag to `train`, writing into `a`.
void add_train_options(CLI::App& train, TrainArgs& a);

/// The options of a parsed command line: model config (a built-in name or a JSON file), the
/// schedule, scaling and algorithm names parsed, bucket sizes in bytes. Without --data,
/// Fashion-MNIST is imported (collective on `comm`). Throws naming the flag on a bad value.
hpctrain::train::TrainOptions resolve_train_options(TrainArgs& a, Communicator& comm);

/// The JSON in the regular file `path`; errors name `option` and the file.
nlohmann::json parse_json_file(const std::string& option, const std::string& path, const std::string& unreadable);

/// A JSON key as a long option name: `global_batch` and `global-batch` are the same option.
std::string option_name(const std::string& key);

/// A JSON object of option names and values as command-line arguments: `"epochs": 2` ->
/// `--epochs 2`, `true` -> the bare flag, `false` -> nothing, strings unquoted.
std::vector<std::string> json_to_arguments(const nlohmann::json& object);

/// `--config FILE`: the file's JSON object as arguments (json_to_arguments); errors name the file.
std::vector<std::string> config_arguments(const std::string& path);

}  // namespace hpctrain::cli
