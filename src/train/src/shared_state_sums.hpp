#pragma once
// SharedStateSums: under ZeRO the summed gradient is reduce-scattered, so each rank holds only
// its shard of the gradient slots of the model's non-trainable entries (batch norm's running
// statistics: the per-channel sums Σ(x − running_mean), Σ(x − running_mean)² and the element
// count, docs/models.md). Sequential::update_state() needs all of them on every rank.
//
// Schedule, once per optimiser step: every rank packs the state slots it owns into a buffer of
// all state elements (zeros where another rank owns them), clears them in its gradient shard
// (so the clipping norm leaves them out, as update_state() leaves them zero for ddp), and the
// buffer is all-reduced. Each element has exactly one non-zero contribution, so the sum is the
// owner's value bit for bit, on every rank. The packed values are then written into the state
// slots of the model's full gradient buffer, where update_state() reads them.
// Cost: one all-reduce of s floats (s = the model's state elements, 2·C + 1 per batch-norm
// layer), α·log p + s·β; two element-wise passes over s elements.

#include <cstdint>

#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/core/tensor.hpp"
#include "hpctrain/models/sequential.hpp"
#include "hpctrain/train/shard_layout.hpp"

namespace hpctrain::train {

class SharedStateSums {
 public:
  /// Where the model's state slots lie in the full gradient buffer and in this rank's part of
  /// `shard` (zero2's gradient shard: ShardLayout's local offsets), or in the full buffer
  /// itself (`shard_is_full`, zero1 before compaction: global offsets). No state: empty.
  SharedStateSums(const models::Sequential<float>& model, const ShardLayout& layout, bool shard_is_full);

  /// Bytes it holds (packed values and two indices per state element).
  std::uint64_t bytes() const noexcept;

  /// Collective. Moves this rank's summed state slots out of `shard` (zeroing them there),
  /// all-reduces them and writes every state slot of `full_gradient`. Returns the seconds spent
  /// in the all-reduce.
  double share(coll::Communicator& comm, const core::Vec<float>& shard, const core::Vec<float>& full_gradient);

 private:
  std::int64_t count_ = 0;
  Kokkos::View<std::int64_t*, core::MemSpace> owned_;   ///< index into the shard, -1: another rank owns it
  Kokkos::View<std::int64_t*, core::MemSpace> global_;  ///< index into the full gradient buffer
  core::Vec<float> packed_;
};

}  // namespace hpctrain::train
