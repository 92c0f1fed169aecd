#pragma once
/// @file
/// Which checkpoint step a `--checkpoint` argument names, checked before anything is read.

#include <cstdint>
#include <string>

namespace hpctrain::serve {

/// A verified checkpoint step directory and what its manifest says about the model.
struct CheckpointSource {
  std::string step_dir;            ///< e.g. "ckpt/step-120"
  std::int64_t step = 0;           ///< the manifest's step
  std::string parameter_checksum;  ///< "xxh3:<16 hex digits>" of the parameters as written
};

/// Resolves `path`: a step directory (it has a manifest.json, or its name starts with "step-")
/// is taken as it is; any other directory is a checkpoint directory and its newest valid step
/// is taken (what `latest` names if it verifies, else the newest that does; damaged candidates
/// are printed to stderr as skipped). The chosen step is verified (io::verify_checkpoint: every
/// shard's size and checksum) and must hold a model config and a parameter checksum. Throws
/// hpctrain::Error naming `option`, the path and every problem. Local (no communication).
CheckpointSource resolve_checkpoint(const std::string& path, const std::string& option = "--checkpoint");

/// Whether `dir` is a checkpoint directory (not one step): reloading looks for newer steps there.
bool is_checkpoint_directory(const std::string& dir);

}  // namespace hpctrain::serve
