#include "hpctrain/io/checkpoint_lock.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <iterator>
#include <thread>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "hpctrain/base/error.hpp"
#include "hpctrain/collectives/agreement.hpp"
#include "hpctrain/io/checkpoint.hpp"

namespace hpctrain::io {

namespace fs = std::filesystem;

namespace {

constexpr const char* kLockName = ".hpctrain.lock";

/// True when `pid` has ended: no such process, or a zombie (in containers whose PID 1 does not
/// reap, a killed rank stays one). A process still being killed (the ranks of a job that just
/// ended) is given up to 2 s.
bool process_is_gone(pid_t pid) {
  for (int attempt = 0; attempt < 20; ++attempt) {
    if (kill(pid, 0) != 0 && errno == ESRCH) return true;
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const auto paren = text.rfind(')');  // "pid (comm) S ...": comm may hold spaces and parentheses
    if (paren != std::string::npos && paren + 2 < text.size() && (text[paren + 2] == 'Z' || text[paren + 2] == 'X'))
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

/// Who holds (or would hold) a lock: the file's one line, "host pid slurm_job restart".
struct LockHolder {
  std::string host;
  long pid = -1;
  std::string slurm_job = "-";
  long restart = 0;

  static LockHolder me() {
    LockHolder h;
    char name[256] = {};
    gethostname(name, sizeof name - 1);
    h.host = name;
    h.pid = static_cast<long>(getpid());
    if (const char* job = std::getenv("SLURM_JOB_ID")) h.slurm_job = job;
    if (const char* count = std::getenv("SLURM_RESTART_COUNT")) h.restart = std::atol(count);
    return h;
  }
  std::string line() const {
    return host + " " + std::to_string(pid) + " " + slurm_job + " " + std::to_string(restart) + "\n";
  }
  std::string describe() const {
    std::string s = "pid " + std::to_string(pid) + " on host " + host;
    if (slurm_job != "-") s += " (Slurm job " + slurm_job + ", restart " + std::to_string(restart) + ")";
    return s;
  }
  /// Why the holder is known to be gone, or "" when it may still run.
  std::string gone_because(const LockHolder& me) const {
    if (slurm_job != "-" && slurm_job == me.slurm_job && restart < me.restart)
      return "an earlier run of this Slurm job (restart " + std::to_string(restart) + ")";
    if (host == me.host && pid > 0 && process_is_gone(static_cast<pid_t>(pid)))
      return "pid " + std::to_string(pid) + " no longer runs on this host";
    return "";
  }
};

LockHolder read_holder(const std::string& path) {
  LockHolder h;
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  std::istringstream fields(line);
  fields >> h.host >> h.pid >> h.slurm_job >> h.restart;
  if (h.host.empty()) h.host = "(unreadable lock file)";
  return h;
}

/// Creates `path` exclusively with `content`; false when it exists already.
bool create_exclusive(const std::string& path, const std::string& content) {
  const int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0 && errno == EEXIST) return false;
  HPCTRAIN_REQUIRE(fd >= 0, "checkpoint lock '" + path + "': cannot create: " + std::strerror(errno));
  const ssize_t written = ::write(fd, content.data(), content.size());
  const int saved = errno;
  ::close(fd);
  if (written != static_cast<ssize_t>(content.size())) {
    ::unlink(path.c_str());
    HPCTRAIN_FAIL("checkpoint lock '" + path + "': cannot write: " + std::strerror(saved));
  }
  return true;
}

// The lock this process holds, removed by abort_job (which skips destructors).
char held_path[4096];
std::atomic<bool> holding{false};
void remove_held_lock() noexcept {
  if (holding.exchange(false)) ::unlink(held_path);
}

void note_held(const std::string& path) {
  static const bool registered = (add_abort_cleanup(&remove_held_lock), true);
  (void)registered;
  if (path.size() < sizeof held_path) {
    std::memcpy(held_path, path.c_str(), path.size() + 1);
    holding = true;
  }
}

/// The committed steps (`step-<N>` directories) and `latest` under `dir`, by name.
std::vector<std::string> committed_checkpoints(const fs::path& dir) {
  std::vector<std::string> found;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if ((name.rfind("step-", 0) == 0 && e.is_directory()) || name == "latest") found.push_back(name);
  }
  std::sort(found.begin(), found.end());
  return found;
}

}  // namespace

CheckpointDirLock CheckpointDirLock::take(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  HPCTRAIN_REQUIRE(!ec, "--checkpoint-dir '" + dir + "': cannot create: " + ec.message());
  const std::string path = (fs::path(dir) / kLockName).string();
  const LockHolder me = LockHolder::me();
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (create_exclusive(path, me.line())) {
      note_held(path);
      return CheckpointDirLock(path);
    }
    const LockHolder holder = read_holder(path);
    const std::string gone = holder.gone_because(me);
    HPCTRAIN_REQUIRE(!gone.empty() && attempt == 0,
                     "checkpoint directory '" + dir + "' is in use by another run: its lock '" + path +
                         "' is held by " + holder.describe() +
                         ". Use another --checkpoint-dir, or remove the lock if that run is gone");
    std::fprintf(stderr, "hpctrain: warning: taking over the stale lock '%s' of %s: %s\n", path.c_str(),
                 holder.describe().c_str(), gone.c_str());
    ::unlink(path.c_str());
  }
  HPCTRAIN_FAIL("checkpoint lock '" + path + "': could not be taken");
}

CheckpointDirLock::~CheckpointDirLock() { release(); }

CheckpointDirLock::CheckpointDirLock(CheckpointDirLock&& other) noexcept : path_(std::exchange(other.path_, {})) {}

CheckpointDirLock& CheckpointDirLock::operator=(CheckpointDirLock&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::exchange(other.path_, {});
  }
  return *this;
}

void CheckpointDirLock::release() noexcept {
  if (path_.empty()) return;
  if (holding.load() && path_ == held_path) holding = false;
  ::unlink(path_.c_str());
  path_.clear();
}

CheckpointDirLock claim_checkpoint_dir(coll::Communicator& comm, const std::string& dir, bool resuming, bool overwrite) {
  CheckpointDirLock lock;
  coll::rank0_decides(comm, [&] {
    lock = CheckpointDirLock::take(dir);
    for (const auto& step : recover_interrupted_rewrites(dir)) {
      std::fprintf(stderr, "hpctrain: warning: recovered '%s' from its aside copy (a re-write of that step was interrupted)\n",
                   step.c_str());
    }
    if (resuming) return;
    const auto found = committed_checkpoints(dir);
    if (found.empty()) return;
    if (overwrite) {
      // Removed now, not replaced step by step: pruning keeps the highest step numbers, which
      // would otherwise be the earlier run's, not this one's.
      for (const auto& name : found) fs::remove_all(fs::path(dir) / name);
      std::fprintf(stderr, "hpctrain: --overwrite-checkpoints: removed %zu checkpoint entries of an earlier run from '%s'\n",
                   found.size(), dir.c_str());
      return;
    }
    std::string names;
    for (std::size_t i = 0; i < found.size() && i < 4; ++i) names += (i ? ", " : "") + found[i];
    if (found.size() > 4) names += ", ...";
    HPCTRAIN_FAIL("--checkpoint-dir '" + dir + "' already holds checkpoints (" + names +
                  ") and this run does not resume: pass --resume auto to continue from them, or "
                  "--overwrite-checkpoints to remove them and start afresh");
  });
  return lock;
}

}  // namespace hpctrain::io
