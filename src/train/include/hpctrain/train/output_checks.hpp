#pragma once
/// @file
/// Output files checked before the first step, and their writes checked as they happen, so a
/// run does not train for hours to fail (or silently lose its metrics) at the end.

#include <ostream>
#include <string>

#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/train/trainer.hpp"

namespace hpctrain::train {

/// Collective: rank 0 checks that --metrics and --timeline can be written, and creates the
/// --tensorboard directory and checks a file can be made there (opened for
/// appending; a file the probe created is removed again); every rank agrees on the verdict,
/// so all stop before training, the cause printed once by rank 0. (--checkpoint-dir is proved
/// writable by its lock file, io::claim_checkpoint_dir.)
void require_writable_outputs(coll::Communicator& comm, const TrainOptions& o);

/// Throws naming `option` and `path` when `out` has failed (a write or flush of it did not
/// reach the file: disk full, quota, I/O error). Call after flushing.
void require_written(const std::ostream& out, const char* option, const std::string& path);

}  // namespace hpctrain::train
