// libFuzzer target: `hpctrain train --config FILE` (config_arguments in src/cli/train_options.cpp:
// the file's JSON object turned into command-line arguments), then those arguments parsed by
// the same CLI11 definition `hpctrain train` uses (add_train_options). Any input must be
// accepted or rejected with hpctrain::Error or CLI::Error (what main reports as a usage error).

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "fuzz_files.hpp"
#include "hpctrain/collectives/error.hpp"
#include "train_options.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto path = hpctrain::fuzz::scratch_dir() / "config.json";
  hpctrain::fuzz::write_file(path, data, size);
  std::vector<std::string> args;
  try {
    args = hpctrain::cli::config_arguments(path.string());
  } catch (const hpctrain::Error&) {
    return 0;
  }
  CLI::App app{"fuzz"};
  CLI::App* train = app.add_subcommand("train");
  hpctrain::cli::TrainArgs a;
  hpctrain::cli::add_train_options(*train, a);
  args.insert(args.begin(), "train");
  std::reverse(args.begin(), args.end());  // CLI11's vector form takes the arguments reversed
  try {
    app.parse(args);
  } catch (const CLI::Error&) {
  } catch (const hpctrain::Error&) {
  }
  return 0;
}
