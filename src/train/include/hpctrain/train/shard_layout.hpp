#pragma once
/// @file
/// ShardLayout: which elements of the flat parameter buffer a rank owns under ZeRO. Every
/// gradient bucket (plan_gradient_buckets) is cut into the balanced partition of P blocks
/// (coll::balanced_block: lengths differ by at most one, no padding), and rank r owns block r
/// of each bucket. The rank's shard is the concatenation of its blocks in order of their place
/// in the buffer; its optimiser state is stored in that order
/// (so compact() can move the blocks to the buffer's front in place). A tensor lies
/// inside one bucket, so a rank owns one contiguous slice (possibly empty) of each tensor.
/// Shards sum to the whole buffer: sum over r of shard_count() = parameter count.

#include <cstdint>
#include <vector>

#include "hpctrain/core/tensor.hpp"
#include "hpctrain/train/data_parallel.hpp"

namespace hpctrain::train {

/// A run of elements this rank owns: [global_offset, + count) of the flat buffer, stored at
/// [local_offset, + count) of the shard.
struct ShardRange {
  std::int64_t global_offset = 0;
  std::int64_t local_offset = 0;
  std::int64_t count = 0;
};

class ShardLayout {
 public:
  ShardLayout(const std::vector<GradientBucket>& buckets, int ranks, int rank);

  /// One range per bucket, in bucket order (local offsets ascend with global ones).
  const std::vector<ShardRange>& ranges() const noexcept { return ranges_; }
  /// Elements of this rank's shard.
  std::int64_t shard_count() const noexcept { return shard_count_; }
  /// The part of the flat range [offset, offset + count) (one tensor) this rank owns
  /// (count 0 when none).
  ShardRange slice_of(std::int64_t offset, std::int64_t count) const;

  /// Zeroes every element of `full` this rank does not own (its own blocks keep their values
  /// at their places): zero2's hand-over between micro-batches, so the next backward adds onto
  /// the summed shard and onto zeros elsewhere.
  void clear_unowned(const core::Vec<float>& full) const;
  /// In place: moves this rank's elements of `full` to its front, full[local] = full[global]
  /// (elements outside the shard are overwritten), so the first shard_count() elements are the
  /// shard with no second buffer. A block whose source and destination overlap goes through a
  /// temporary of its size (at most one bucket's block).
  void compact(const core::Vec<float>& full) const;
  /// The inverse of compact(): full[global] = full[local]; the elements outside the shard are
  /// left unspecified (the parameter all-gather overwrites them).
  void expand(const core::Vec<float>& full) const;

 private:
  std::vector<ShardRange> ranges_;
  std::vector<std::size_t> ascending_;  ///< indices of ranges_ by global offset
  std::int64_t shard_count_ = 0;
};

}  // namespace hpctrain::train
