#pragma once
/// @file
/// Sharded HDF5 checkpoints: atomic commit, corruption detection, resharding on load.
///
/// Layout of `<dir>/step-<N>/`:
///   manifest.json                      format, step, world size, caller's metadata, every
///                                      tensor's global shape and which shard holds which slice,
///                                      every shard's byte size and XXH3-64 checksum, and
///                                      (format_version 2) `manifest_xxh3`: the XXH3-64 of the
///                                      manifest itself (compact, sorted-key JSON without
///                                      that field)
///   shard-<r>-of-<P>.h5                rank r's slices: one 1-D float32 dataset per tensor
///                                      piece, named by the tensor (e.g. /params/0.dense.weight),
///                                      with attributes `global_shape` and `offset` (elements)
/// `<dir>/latest` holds the name of the newest committed step directory.
///
/// Replicated tensors (data-parallel parameters and optimiser state) are written once: the
/// concatenation of all tensors is split evenly over the ranks, so each rank writes about 1/P
/// of the bytes.
///
/// Commit: shards are written into `<dir>/.step-<N>.tmp/`, fsynced and checksummed; the ranks
/// agree that every shard succeeded; rank 0 writes the manifest (temporary name, fsync,
/// rename), renames the directory to `step-<N>`, fsyncs `<dir>`, then replaces `latest` the
/// same way and prunes old steps beyond `keep`. A crash at any point leaves the previous
/// checkpoint and `latest` intact; leftover temporaries are removed by the next commit.

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hpctrain/collectives/communicator.hpp"

namespace hpctrain::io {

/// A float32 tensor held identically by every rank (host memory).
struct CheckpointTensor {
  std::string name;                 ///< HDF5 path inside a shard, e.g. "params/0.dense.weight"
  std::vector<std::int64_t> shape;  ///< global shape
  const float* data = nullptr;      ///< product(shape) elements
};

struct CommitResult {
  std::string path;            ///< the committed step directory
  std::uint64_t bytes = 0;     ///< all shards together
  double seconds = 0.0;        ///< write + commit, max over ranks
};

/// One rank's slice of a float32 tensor that is split over the ranks (a ZeRO optimiser-state
/// shard): every element is written by exactly one rank.
struct CheckpointSlice {
  std::string name;                 ///< as CheckpointTensor::name
  std::vector<std::int64_t> shape;  ///< global shape
  std::int64_t offset = 0;          ///< first element of the flattened tensor this rank holds
  std::int64_t count = 0;           ///< elements this rank holds (0: none)
  const float* data = nullptr;      ///< `count` elements (host memory)
};

/// Writes a checkpoint of the `replicated` tensors (every rank holds them whole; split evenly
/// as above) and of the `sharded` ones (each rank writes the slice it holds, as is, into its
/// own shard file: no gathering). Every rank passes the same sharded names and shapes in the
/// same order; their slices must tile each tensor (checked: a gap or an overlap throws on
/// every rank before anything is committed). The manifest records the slices as pieces, so
/// any reader at any P reads them like any other tensor. Otherwise as write_checkpoint.
CommitResult write_checkpoint(coll::Communicator& comm, const std::string& dir, std::int64_t step,
                              const nlohmann::json& metadata, const std::vector<CheckpointTensor>& replicated,
                              const std::vector<CheckpointSlice>& sharded, int keep);

/// Writes a checkpoint of `tensors` at `step` (collective over `comm`). `metadata` is stored in
/// the manifest as is. Keeps the newest `keep` (>= 1) steps. Throws hpctrain::Error naming the
/// file on any failure on any rank; the previous checkpoint stays intact.
CommitResult write_checkpoint(coll::Communicator& comm, const std::string& dir, std::int64_t step,
                              const nlohmann::json& metadata, const std::vector<CheckpointTensor>& tensors,
                              int keep);

/// A problem found while checking a checkpoint: which file, what is wrong.
struct CheckpointProblem {
  std::string path;
  std::string what;
};

/// Checks a step directory: manifest present, well-formed and within limits; every shard
/// present with the recorded size and checksum. Returns the problems (empty = valid).
/// `max_elements` bounds what a manifest may claim (rejects absurd shapes before allocating);
/// so does the shard's recorded byte size: the pieces a shard holds cannot claim more float32
/// elements than fit in it.
std::vector<CheckpointProblem> verify_checkpoint(const std::string& step_dir,
                                                 std::int64_t max_elements = std::int64_t{1} << 34);

/// The step directory `latest` names if it verifies, else the newest valid step directory under
/// `dir` (each checked with verify_checkpoint, newest first); "" when there is none. Every invalid candidate is appended to
/// `skipped`. Local (no communication).
std::string find_latest_checkpoint(const std::string& dir, std::vector<CheckpointProblem>* skipped);

/// Renames every `.step-<N>.old` under `dir` whose `step-<N>` is missing back to `step-<N>`:
/// a re-write of an existing step sets the old one aside, renames the new one in, then removes
/// the old one, so a crash between the renames leaves the committed step under its aside name.
/// Returns the recovered step directories. Local; call only while holding the directory's lock.
std::vector<std::string> recover_interrupted_rewrites(const std::string& dir);

/// A warning for a manifest that verifies but is unprotected (format_version 1: no checksum of
/// its own), or "" when there is nothing to say.
std::string manifest_warning(const nlohmann::json& manifest);

/// The parsed manifest of a step directory (throws naming the file when unreadable).
nlohmann::json read_manifest(const std::string& step_dir);

/// Where to put a tensor read from a checkpoint.
struct CheckpointDestination {
  std::string name;
  std::vector<std::int64_t> shape;  ///< must equal the stored global shape
  float* data = nullptr;
};

/// Reads every destination tensor from the pieces of whichever shards hold it (any writer
/// rank count), after checking names and shapes against the manifest. Local (each rank reads
/// what it needs).
void read_checkpoint_tensors(const std::string& step_dir, const std::vector<CheckpointDestination>& tensors);

/// Names of the tensors recorded in a manifest, in order, with their shapes.
std::vector<std::pair<std::string, std::vector<std::int64_t>>> checkpoint_tensor_list(const nlohmann::json& manifest);

}  // namespace hpctrain::io

namespace hpctrain::io {

/// Writes the tensors of a (verified) step directory whose names start with `prefix` into one
/// HDF5 file, each under its name without the prefix and with its global shape (written under
/// a temporary name, then renamed). Returns the number of tensors written.
std::size_t export_checkpoint(const std::string& step_dir, const std::string& out_path,
                              const std::string& prefix = "params/");

}  // namespace hpctrain::io
