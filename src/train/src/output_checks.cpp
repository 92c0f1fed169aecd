#include "hpctrain/train/output_checks.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "hpctrain/base/error.hpp"
#include "hpctrain/collectives/agreement.hpp"

namespace hpctrain::train {

namespace {

void probe_writable(const char* option, const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  HPCTRAIN_REQUIRE(!fs::is_directory(path, ec),
                   std::string(option) + ": cannot write '" + path + "': it is a directory");
  const bool existed = fs::exists(path, ec);
  errno = 0;
  std::ofstream out(path, std::ios::app);
  HPCTRAIN_REQUIRE(out.good(), std::string(option) + ": cannot write '" + path + "': " +
                                   (errno ? std::strerror(errno) : "cannot open for writing"));
  out.close();
  if (!existed) fs::remove(path, ec);
}

/// Creates `dir` (and its parents) if needed and checks that a file can be made in it.
void probe_writable_directory(const char* option, const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  HPCTRAIN_REQUIRE(!ec && fs::is_directory(dir, ec),
                   std::string(option) + ": cannot create directory '" + dir + "'" + (ec ? ": " + ec.message() : ""));
  probe_writable(option, (fs::path(dir) / ".hpctrain-write-probe").string());
}

}  // namespace

void require_writable_outputs(coll::Communicator& comm, const TrainOptions& o) {
  coll::rank0_decides(comm, [&] {
    if (!o.metrics_path.empty()) probe_writable("--metrics", o.metrics_path);
    if (!o.timeline_path.empty()) probe_writable("--timeline", o.timeline_path);
    if (!o.tensorboard_dir.empty()) probe_writable_directory("--tensorboard", o.tensorboard_dir);
  });
}

void require_written(const std::ostream& out, const char* option, const std::string& path) {
  HPCTRAIN_REQUIRE(out.good(), std::string(option) + ": writing '" + path +
                                   "' failed (disk full, quota or I/O error); the run stops rather than lose it");
}

}  // namespace hpctrain::train
