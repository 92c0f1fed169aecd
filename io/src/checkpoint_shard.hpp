#pragma once
// (internal) Writing one checkpoint shard file in one pass over its bytes.
//
// A shard is an ordinary HDF5 file: one contiguous 1-D float32 dataset per piece, with
// attributes `global_shape` and `offset`. Its checksum (the manifest's `xxh3`) is the XXH3-64 of
// the whole file, read front to back, as `digest_file` computes it.
//
// Writing it through H5Dwrite and then reading the file back to hash it passes every byte
// through the CPU twice (HDF5's copy into the page cache, then the checksum's re-read). Instead:
//   1. HDF5 lays the file out: every dataset is created with its raw data allocated at once
//      (H5D_ALLOC_TIME_EARLY, never filled) and its attributes written; H5Dget_offset gives
//      where each piece's bytes go. The file is closed: HDF5 has written all of its metadata
//      (a few KiB) and extended the file to its final size.
//   2. HDF5's metadata (every stretch of the file outside the pieces, a few KiB) is read back,
//      the file truncated, and the whole file written again from its start, append-only (what
//      a plain write() of a new file does, which the file system handles best): metadata from
//      memory, the pieces from the tensors in chunks small enough to stay in the CPU cache.
//      Each chunk is hashed, then written, so the tensor bytes are read from memory once.
//   3. fsync. Writeback is started every 8 MiB, so the device works while the CPU copies.
//      Why rewrite rather than fill in: writing the pieces with pwrite into the holes of the
//      file HDF5 had extended measured 0.55-0.70 of the write+fsync bound at P = 2, 256 MiB;
//      appending, 0.83-0.90 in the same conditions (docs/checkpoints.md).
// The file is byte for byte an HDF5 file any reader (h5py, h5dump, read_checkpoint_tensors)
// reads; the checksum is the same function of the file's bytes as before, so shards written
// by earlier versions verify unchanged.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "hpctrain/io/durable_file.hpp"
#include "hpctrain/io/h5.hpp"

namespace hpctrain::io::detail {

/// What one rank writes of one tensor: elements [offset, offset + count) taken from `data`.
struct ShardPiece {
  const std::string* name;                  ///< dataset path without the leading '/'
  const std::vector<std::int64_t>* shape;   ///< the tensor's global shape (attribute)
  std::int64_t offset = 0, count = 0;       ///< elements of the flattened tensor
  const float* data = nullptr;              ///< the piece's first element
};

/// A link-creation property list that creates missing intermediate groups ("params/0.w").
H5PropList intermediate_group_creation();

/// Writes the shard at `path` (created or truncated), fsyncs it and returns its size and
/// XXH3-64, computed while writing. `after_first_piece` runs once the first piece's bytes are
/// in the file (the crash-test hook). Throws hpctrain::Error naming the file.
FileDigest write_shard_file(const std::string& path, const std::vector<ShardPiece>& pieces,
                            const std::function<void()>& after_first_piece);

}  // namespace hpctrain::io::detail
