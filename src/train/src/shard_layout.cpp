#include "hpctrain/train/shard_layout.hpp"

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <utility>

#include "hpctrain/collectives/communicator.hpp"

namespace hpctrain::train {

namespace {

using Pair = std::pair<std::int64_t, std::int64_t>;

Pair global_range(const ShardRange& r) { return {r.global_offset, r.global_offset + r.count}; }
Pair local_range(const ShardRange& r) { return {r.local_offset, r.local_offset + r.count}; }

}  // namespace

ShardLayout::ShardLayout(const std::vector<GradientBucket>& buckets, int ranks, int rank) {
  for (const GradientBucket& b : buckets) {
    const coll::BlockRange block = coll::balanced_block(static_cast<std::size_t>(b.count), ranks, rank);
    const auto count = static_cast<std::int64_t>(block.count);
    ranges_.push_back(ShardRange{b.offset + static_cast<std::int64_t>(block.offset), shard_count_, count});
    shard_count_ += count;
  }
}

ShardRange ShardLayout::slice_of(std::int64_t offset, std::int64_t count) const {
  for (const ShardRange& r : ranges_) {
    const std::int64_t lo = std::max(offset, r.global_offset), hi = std::min(offset + count, r.global_offset + r.count);
    if (lo < hi) return ShardRange{lo, r.local_offset + (lo - r.global_offset), hi - lo};
  }
  return ShardRange{offset, 0, 0};
}

void ShardLayout::gather(const core::Vec<float>& full, const core::Vec<float>& shard) const {
  for (const ShardRange& r : ranges_) {
    if (r.count == 0) continue;
    Kokkos::deep_copy(Kokkos::subview(shard, local_range(r)), Kokkos::subview(full, global_range(r)));
  }
}

void ShardLayout::scatter(const core::Vec<float>& shard, const core::Vec<float>& full) const {
  for (const ShardRange& r : ranges_) {
    if (r.count == 0) continue;
    Kokkos::deep_copy(Kokkos::subview(full, global_range(r)), Kokkos::subview(shard, local_range(r)));
  }
}

void ShardLayout::accumulate(const core::Vec<float>& full, const core::Vec<float>& shard) const {
  for (const ShardRange& r : ranges_) {
    if (r.count == 0) continue;
    const auto from = Kokkos::subview(full, global_range(r));
    const auto to = Kokkos::subview(shard, local_range(r));
    Kokkos::parallel_for(
        "hpctrain::ShardLayout::accumulate", Kokkos::RangePolicy<>(0, r.count),
        KOKKOS_LAMBDA(const std::int64_t i) { to(i) += from(i); });
  }
}

}  // namespace hpctrain::train
