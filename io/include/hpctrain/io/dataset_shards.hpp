#pragma once
/// @file
/// Sharded data sets: a directory of hpctrain HDF5 data set files (shards) and an index.
///
/// Layout (docs/data.md):
///   DIR/index.json        {"format": "hpctrain-dataset-shards", "format_version": 1, "count": N,
///                          "shape": [...], "classes": C, "sample_type": "uint8"|"float32",
///                          "scale": s, "source": "...", "class_names": [...],
///                          "shards": [{"file": "shard-00000.h5", "first": 0, "count": n0,
///                                      "bytes": b0}, ...]}
///   DIR/shard-00000.h5 …  each an ordinary data set file (dataset.hpp), holding the samples
///                          [first, first + count) of the whole set in order.
/// Global sample i lives in the shard whose [first, first + count) holds it, so the epoch plan
/// (global indices) is the same for a file and for its shards; DatasetReader opens a shard only
/// when a batch first needs one of its samples.

#include <cstdint>
#include <string>
#include <vector>

#include "hpctrain/io/dataset.hpp"

namespace hpctrain::io {

/// The fixed names of the format.
struct ShardIndexFormat {
  static constexpr const char* file_name = "index.json";
  static constexpr const char* format_name = "hpctrain-dataset-shards";
  static constexpr std::int64_t version = 1;
};

/// One shard as the index records it.
struct ShardEntry {
  std::string path;        ///< the shard file (directory + the index's "file")
  std::int64_t first = 0;  ///< global index of its first sample
  std::int64_t count = 0;  ///< samples it holds
  std::int64_t bytes = 0;  ///< its size when written (checked when it is opened)
};

/// A parsed, checked index: `info` describes the whole set (path = the directory).
struct ShardIndex {
  DatasetInfo info;
  std::vector<ShardEntry> shards;  ///< in order; contiguous, covering [0, info.count)
  /// Every shard holds /targets (regression data, "targets": true in the index). A set with
  /// targets may have no /labels: then info.classes is 0 (the index's "classes": 0).
  bool targets = false;
  std::vector<std::string> feature_names;  ///< the input's `feature_names`, when it had them
};

/// The part of one shard inside a range of global samples.
struct ShardPiece {
  std::size_t shard = 0;    ///< index into ShardIndex::shards
  std::int64_t first = 0;   ///< the piece's first sample, counted from the shard's first
  std::int64_t count = 0;   ///< samples of the piece (>= 1)
};

/// The shards overlapping the global samples [first, first + count), in order, each with the
/// part of it inside the range; their counts add up to `count` (none when count is 0). Throws
/// hpctrain::Error naming the set when the range is not inside [0, info.count).
std::vector<ShardPiece> shards_overlapping(const ShardIndex& index, std::int64_t first, std::int64_t count);

/// True when `path` is a directory holding an index.json.
bool is_sharded_dataset(const std::string& path);

/// Reads and checks `dir`/index.json: the format name and version, a positive count, shape and
/// class count, a known sample type, a finite scale, shards that are contiguous from 0, cover
/// the count, and name plain files inside `dir`. Throws hpctrain::Error naming the index and the
/// entry otherwise. Does not open the shard files.
ShardIndex read_shard_index(const std::string& dir);

/// Checks a shard file just opened (`opened`, its size `bytes` now) against its index entry and
/// the set: same count, shape, classes, sample type and scale, and the size written. Throws
/// naming the shard, the index and what differs.
void require_shard_matches(const ShardIndex& index, std::size_t shard, const DatasetInfo& opened,
                           std::int64_t bytes);

/// Options of split_dataset.
struct ShardOptions {
  std::int64_t shards = 0;            ///< K >= 1, at most the sample count
  std::int64_t block_samples = 4096;  ///< samples copied per read/write
};

/// What split_dataset wrote.
struct ShardResult {
  ShardIndex index;
  std::int64_t bytes = 0;  ///< the shard files' total size
};

/// Splits the data set file `in` into K shards of contiguous samples (sizes differing by at most
/// one) under `out_dir`, copying the stored values (uint8 stays uint8), /labels, /targets (float64,
/// regression data) when present, and the set's attributes (feature_names included). A file
/// without /labels must have /targets (hpctrain data import-csv --target writes such files).
/// Written under a temporary directory name beside `out_dir`, every file fsync'ed, then renamed:
/// `out_dir` either holds a complete sharded set or does not exist. `out_dir` must not exist.
/// The same input and K give the same file bytes. Throws hpctrain::Error naming the file, option
/// or directory.
ShardResult split_dataset(const std::string& in, const std::string& out_dir, const ShardOptions& options);

}  // namespace hpctrain::io
