#pragma once
// A temporary directory of the test process, removed when the process exits (ctest runs each
// TEST of a unit-test binary as its own process, so the pid keeps concurrent tests apart).

#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace hpctrain::testing {

/// <temp>/<prefix><pid>, created on first use and removed with everything in it at exit.
inline const std::filesystem::path& process_temp_dir(const std::string& prefix) {
  struct Dir {
    std::filesystem::path path;
    ~Dir() {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
  };
  static const Dir dir{std::filesystem::temp_directory_path() / (prefix + std::to_string(::getpid()))};
  std::filesystem::create_directories(dir.path);
  return dir.path;
}

}  // namespace hpctrain::testing
