#include "hpctrain/serve/checkpoint_source.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <vector>

#include "hpctrain/base/error.hpp"
#include "hpctrain/io/checkpoint.hpp"

namespace hpctrain::serve {

namespace fs = std::filesystem;

bool is_checkpoint_directory(const std::string& dir) {
  const fs::path p = fs::path(dir).lexically_normal();
  const std::string base = p.filename().empty() ? p.parent_path().filename().string() : p.filename().string();
  std::error_code ec;
  return !fs::exists(p / "manifest.json", ec) && base.rfind("step-", 0) != 0;
}

CheckpointSource resolve_checkpoint(const std::string& path, const std::string& option) {
  std::error_code ec;
  HPCTRAIN_REQUIRE(fs::is_directory(path, ec), option + ": '" + path + "' is not a directory (expected a checkpoint "
                                                               "directory or one of its step-<N> directories)");
  std::string step_dir = path;
  if (is_checkpoint_directory(path)) {
    std::vector<io::CheckpointProblem> skipped;
    step_dir = io::find_latest_checkpoint(path, &skipped);
    for (const auto& p : skipped) {
      std::fprintf(stderr, "hpctrain: skipping checkpoint: %s: %s\n", p.path.c_str(), p.what.c_str());
    }
    HPCTRAIN_REQUIRE(!step_dir.empty(), option + ": '" + path + "' holds no valid checkpoint");
  }
  const auto problems = io::verify_checkpoint(step_dir);
  std::string all;
  for (const auto& p : problems) all += (all.empty() ? "" : "; ") + p.path + ": " + p.what;
  HPCTRAIN_REQUIRE(problems.empty(), option + ": '" + step_dir + "' is not a valid checkpoint: " + all);
  const nlohmann::json manifest = io::read_manifest(step_dir);
  const nlohmann::json& meta = manifest.at("metadata");
  HPCTRAIN_REQUIRE(meta.contains("model") && meta.at("model").is_object() && meta.contains("parameter_checksum"),
                   option + ": '" + step_dir + "' was not written by `hpctrain train` (its manifest has no model "
                   "config or parameter checksum)");
  CheckpointSource s;
  s.step_dir = step_dir;
  s.step = manifest.at("step").get<std::int64_t>();
  s.parameter_checksum = fmt::format("xxh3:{:016x}", meta.at("parameter_checksum").get<std::uint64_t>());
  return s;
}

}  // namespace hpctrain::serve
