#pragma once
/// @file
/// One run per checkpoint directory: `<dir>/.hpctrain.lock`, taken by rank 0 with
/// O_CREAT|O_EXCL, holding the holder's host, pid and Slurm job (id, restart count). Two runs
/// sharing a directory would otherwise commit steps with each other's shards missing.
///
/// A lock is stale, and taken over with a warning, when its holder is gone: the same host and
/// its pid no longer runs, or the same Slurm job at an earlier restart (a requeued job). Any
/// other holder makes the second run fail naming it. Released by the destructor, and by
/// abort_job when the job ends on an error.

#include <string>

#include "hpctrain/collectives/communicator.hpp"

namespace hpctrain::io {

/// Owns a checkpoint directory's lock file (or nothing). Movable, the source emptied; the
/// destructor removes the file and never throws.
class CheckpointDirLock {
 public:
  CheckpointDirLock() = default;
  /// Local: creates `dir` if needed and takes its lock; throws naming the holder when a live
  /// run holds it.
  static CheckpointDirLock take(const std::string& dir);
  ~CheckpointDirLock();
  CheckpointDirLock(CheckpointDirLock&& other) noexcept;
  CheckpointDirLock& operator=(CheckpointDirLock&& other) noexcept;
  CheckpointDirLock(const CheckpointDirLock&) = delete;
  CheckpointDirLock& operator=(const CheckpointDirLock&) = delete;
  /// The lock file, or "" when nothing is held.
  const std::string& path() const noexcept { return path_; }

 private:
  explicit CheckpointDirLock(std::string path) : path_(std::move(path)) {}
  void release() noexcept;
  std::string path_;
};

/// Collective: rank 0 takes the lock of `dir` and, for a run that does not resume
/// (`resuming` false), checks that `dir` holds no committed checkpoint of an earlier run
/// (`step-<N>`, `latest`), or with `overwrite` removes them; every rank agrees on the verdict (rank 0 reports). Returns rank 0's lock, an
/// empty one on other ranks.
CheckpointDirLock claim_checkpoint_dir(coll::Communicator& comm, const std::string& dir, bool resuming, bool overwrite);

}  // namespace hpctrain::io
