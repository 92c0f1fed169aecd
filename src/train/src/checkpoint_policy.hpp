#pragma once
// When a run checkpoints and how it resumes: every --checkpoint-every steps, every
// --checkpoint-every-s seconds (rank 0's clock), on a preemption signal (any rank's) and at the
// last step, all decided by all ranks together at a step boundary; --resume picks a checkpoint
// on rank 0, checks it was written by a run with the same identity and loads it on every rank.

#include <chrono>
#include <cstdint>
#include <string>

#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/core/optimizer.hpp"
#include "hpctrain/models/sequential.hpp"
#include "hpctrain/train/shard_layout.hpp"
#include "hpctrain/train/trainer.hpp"

namespace hpctrain::train {

/// Where a run starts: fresh (path empty, all zero) or after a checkpoint's step.
struct ResumePoint {
  std::string path;             ///< the step directory read
  std::int64_t step = 0;        ///< optimiser steps already taken
  std::int64_t epoch = 0;       ///< epoch of the next batch
  std::int64_t next_batch = 0;  ///< first global batch not yet trained on (may equal the epoch's batch count)
};

/// Collective. For --resume other than "none": loads parameters, optimiser state and step count
/// into `model` and `optimizer` on every rank. Rank 0 chooses and validates the checkpoint; an
/// error there is thrown on every rank. With `shard` (ZeRO) the optimiser holds and gets only
/// that part of the state; any checkpoint (written by any strategy at any P) resumes.
ResumePoint resume_from_checkpoint(coll::Communicator& comm, const TrainOptions& options,
                                   models::Sequential<float>& model, core::Optimizer<float>& optimizer,
                                   std::int64_t data_samples, const ShardLayout* shard);

class CheckpointPolicy {
 public:
  /// Validates the checkpoint options; with --checkpoint-dir installs the preemption handlers.
  /// `shard`: the optimiser state this rank holds (null: all of it, replicated); each rank then
  /// writes its own optimiser-state slices (io::CheckpointSlice).
  CheckpointPolicy(const TrainOptions& options, coll::Communicator& comm, std::int64_t data_samples,
                   const ShardLayout* shard);

  /// Collective (when checkpointing), after optimiser step `step`: writes a checkpoint when one
  /// is due; `next_batch` is the first global batch of `epoch` not yet trained on. Returns true
  /// when a preemption signal arrived: the checkpoint is written and the run must stop.
  bool after_step(std::int64_t step, std::int64_t total_steps, std::int64_t epoch, std::int64_t next_batch,
                  models::Sequential<float>& model, core::Optimizer<float>& optimizer);
  std::int64_t checkpoints_written() const noexcept { return written_; }

 private:
  const TrainOptions& options_;
  coll::Communicator& comm_;
  std::int64_t data_samples_;
  const ShardLayout* shard_;
  bool enabled_;
  std::chrono::steady_clock::time_point last_checkpoint_ = std::chrono::steady_clock::now();
  std::int64_t written_ = 0;
};

}  // namespace hpctrain::train
