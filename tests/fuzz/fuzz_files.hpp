#pragma once
// The fuzz targets feed the parsers' real entry points, which take file paths: each input is
// written to a file in a per-process scratch directory on tmpfs (/dev/shm when writable, else
// $TMPDIR or /tmp), removed at exit.

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace hpctrain::fuzz {

/// The scratch directory of this process, created on first use.
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::path base = "/dev/shm";
    if (access(base.c_str(), W_OK) != 0) {
      const char* tmp = std::getenv("TMPDIR");
      base = tmp ? tmp : "/tmp";
    }
    fs::path d = base / ("hpctrain-fuzz-" + std::to_string(::getpid()));
    fs::create_directories(d);
    std::atexit([] { std::error_code e; std::filesystem::remove_all(scratch_dir(), e); });
    return d;
  }();
  return dir;
}

/// Writes `size` bytes to `path` (replacing it).
inline void write_file(const std::filesystem::path& path, const std::uint8_t* data, std::size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
}

}  // namespace hpctrain::fuzz
