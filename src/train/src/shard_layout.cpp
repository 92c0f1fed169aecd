#include "hpctrain/train/shard_layout.hpp"

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "hpctrain/collectives/communicator.hpp"

namespace hpctrain::train {

namespace {

using Pair = std::pair<std::int64_t, std::int64_t>;


/// dst[0, count) = src[0, count) within one view, where the two ranges may overlap.
void move_within(const core::Vec<float>& v, std::int64_t from, std::int64_t to, std::int64_t count) {
  if (from == to || count == 0) return;
  const auto src = Kokkos::subview(v, Pair{from, from + count});
  const auto dst = Kokkos::subview(v, Pair{to, to + count});
  if (std::abs(from - to) >= count) {
    Kokkos::deep_copy(dst, src);
    return;
  }
  const core::Vec<float> staging(Kokkos::view_alloc(Kokkos::WithoutInitializing, "hpctrain::ShardLayout::staging"),
                                 static_cast<std::size_t>(count));
  Kokkos::deep_copy(staging, src);
  Kokkos::deep_copy(dst, staging);
}

}  // namespace

ShardLayout::ShardLayout(const std::vector<GradientBucket>& buckets, int ranks, int rank) {
  for (const GradientBucket& b : buckets) {
    const coll::BlockRange block = coll::balanced_block(static_cast<std::size_t>(b.count), ranks, rank);
    ranges_.push_back(ShardRange{b.offset + static_cast<std::int64_t>(block.offset), 0,
                                 static_cast<std::int64_t>(block.count)});
  }
  // Local offsets in order of the global ones: then local <= global for every block, which is
  // what lets compact() work in place.
  std::vector<std::size_t> order(ranges_.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [this](std::size_t a, std::size_t b) { return ranges_[a].global_offset < ranges_[b].global_offset; });
  for (const std::size_t i : order) {
    ranges_[i].local_offset = shard_count_;
    shard_count_ += ranges_[i].count;
  }
  ascending_ = order;
}

void ShardLayout::compact(const core::Vec<float>& full) const {
  // Ascending: every destination lies below every source not yet moved.
  for (const std::size_t i : ascending_) move_within(full, ranges_[i].global_offset, ranges_[i].local_offset, ranges_[i].count);
}

void ShardLayout::expand(const core::Vec<float>& full) const {
  for (auto it = ascending_.rbegin(); it != ascending_.rend(); ++it) {
    move_within(full, ranges_[*it].local_offset, ranges_[*it].global_offset, ranges_[*it].count);
  }
}

ShardRange ShardLayout::slice_of(std::int64_t offset, std::int64_t count) const {
  for (const ShardRange& r : ranges_) {
    const std::int64_t lo = std::max(offset, r.global_offset), hi = std::min(offset + count, r.global_offset + r.count);
    if (lo < hi) return ShardRange{lo, r.local_offset + (lo - r.global_offset), hi - lo};
  }
  return ShardRange{offset, 0, 0};
}

void ShardLayout::clear_unowned(const core::Vec<float>& full) const {
  std::int64_t from = 0;  // the first element not yet kept or cleared
  for (const std::size_t i : ascending_) {
    if (ranges_[i].count == 0) continue;
    if (ranges_[i].global_offset > from) Kokkos::deep_copy(Kokkos::subview(full, Pair{from, ranges_[i].global_offset}), 0.0f);
    from = ranges_[i].global_offset + ranges_[i].count;
  }
  const auto end = static_cast<std::int64_t>(full.extent(0));
  if (end > from) Kokkos::deep_copy(Kokkos::subview(full, Pair{from, end}), 0.0f);
}

}  // namespace hpctrain::train
