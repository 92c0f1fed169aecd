#pragma once
/// @file
/// ShardLayout: which elements of the flat parameter buffer a rank owns under ZeRO. Every
/// gradient bucket (plan_gradient_buckets) is cut into the balanced partition of P blocks
/// (coll::balanced_block: lengths differ by at most one, no padding), and rank r owns block r
/// of each bucket. The rank's shard is the concatenation of its blocks in bucket order; its
/// optimiser state, and under zero2 its gradient, are stored in that order. A tensor lies
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

  /// One range per bucket, in bucket order.
  const std::vector<ShardRange>& ranges() const noexcept { return ranges_; }
  /// Elements of this rank's shard.
  std::int64_t shard_count() const noexcept { return shard_count_; }
  /// The part of the flat range [offset, offset + count) (one tensor) this rank owns
  /// (count 0 when none).
  ShardRange slice_of(std::int64_t offset, std::int64_t count) const;

  /// shard[local] = full[global] over every range (device views).
  void gather(const core::Vec<float>& full, const core::Vec<float>& shard) const;
  /// full[global] = shard[local] over every range.
  void scatter(const core::Vec<float>& shard, const core::Vec<float>& full) const;
  /// shard[local] += full[global] over every range.
  void accumulate(const core::Vec<float>& full, const core::Vec<float>& shard) const;

 private:
  std::vector<ShardRange> ranges_;
  std::int64_t shard_count_ = 0;
};

}  // namespace hpctrain::train
