#pragma once
// SharedStateSums: under ZeRO the summed gradient is reduce-scattered, so each rank holds only
// its shard of the gradient slots of the model's non-trainable entries (batch norm's running
// statistics: the per-channel sums Σ(x − running_mean), Σ(x − running_mean)² and the element
// count, docs/models.md). Sequential::update_state() needs all of them on every rank.
//
// Schedule, once per optimiser step, before the shard is compacted: every rank packs the state
// slots it owns (at their places in the gradient buffer) into a buffer of all state elements
// (zeros where another rank owns them), and the buffer is all-reduced. Each element has exactly
// one non-zero contribution, so the sum is the owner's value bit for bit, on every rank. The
// packed values are then written into every state slot of the gradient buffer, where
// update_state() reads them (and then zeroes them, so the clipping norm leaves them out, as for ddp).
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
  /// Where the model's state slots lie in the full gradient buffer, and which of them this
  /// rank owns (ShardLayout; the reduce-scatter left their sums at their places). No state: empty.
  SharedStateSums(const models::Sequential<float>& model, const ShardLayout& layout);

  /// Bytes it holds (packed value, index and ownership flag per state element).
  std::uint64_t bytes() const noexcept;

  /// Collective, before the shard is compacted: packs this rank's summed state slots of
  /// `gradient`, all-reduces them and writes every state slot of `gradient` with the owners'
  /// sums. Returns the seconds spent in the all-reduce.
  double share(coll::Communicator& comm, const core::Vec<float>& gradient);

 private:
  std::int64_t count_ = 0;
  Kokkos::View<std::uint8_t*, core::MemSpace> mine_;    ///< 1: this rank owns the slot
  Kokkos::View<std::int64_t*, core::MemSpace> global_;  ///< index into the full gradient buffer
  core::Vec<float> packed_;
};

}  // namespace hpctrain::train
