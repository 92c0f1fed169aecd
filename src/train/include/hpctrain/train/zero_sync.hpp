#pragma once
/// @file
/// ZeroSync: sharded data parallelism, ZeRO stages 1 and 2 (Rajbhandari et al. 2020), behind
/// the GradientSync interface (`--strategy zero1|zero2`).
///
/// Every rank owns one block of each gradient bucket (ShardLayout: the balanced partition of
/// the bucket over P ranks) and keeps the optimiser state only for those elements, so the
/// state per rank is about 1/P of data parallelism's. One optimiser step:
///
///   - gradients: the bucketed backward of BucketedAllreduceSync, but each bucket is
///     reduce-scattered in place (coll::Communicator::ireduce_scatter_in_place, launched from
///     the backward hook, overlapped with the rest of backward) instead of all-reduced. zero1
///     reduces once per step (earlier micro-batches accumulate in the full gradient buffer);
///     zero2 reduces every micro-batch and keeps only its own summed blocks across
///     micro-batches, at their places in the model's gradient buffer (the rest is cleared,
///     ShardLayout::clear_unowned), so the gradient kept across micro-batches is the shard and
///     no second buffer is needed.
///   - apply(), models with state (batch norm's running statistics, docs/models.md): the
///     state entries' summed gradient slots, spread over the shards, are all-reduced (each
///     rank's owned slots, zeros elsewhere: the owner's value on every rank, bit for bit;
///     SharedStateSums) and cleared in the shard; every rank then runs update_state() for the
///     whole model as ddp does, keeps the new state and puts it back after the optimiser step,
///     so the statistics are identical on every rank and the optimiser cannot move them.
///   - apply(): the owned gradient is clipped by the global norm (the shards' sums of squares
///     all-reduced), the owned parameters are moved in place to the front of the parameter
///     buffer (ShardLayout::compact; the same with the gradient, so neither needs a second
///     buffer), the optimiser steps them with the sharded state, they are moved back, and each
///     bucket's parameters are all-gathered in place (iallgather_in_place), queued in the order
///     the next forward needs them (by first layer). apply() returns without waiting: the
///     model's before-layer hook waits, before layer l's forward, for the buckets whose first
///     layer is l, so the all-gather of later layers overlaps with the forward of earlier ones
///     (Sequential::set_before_layer_forward; evaluation forwards wait alike).
///     await_parameters() waits for all (checkpoints, the final checksum); the next apply()
///     and the destructor do too.
///
/// Deterministic mode (zero1 only): the fixed-tree float sum (DeterministicSync) gives every rank
/// the whole summed gradient (state slots included: update_state() as ddp's), bit for bit as
/// `ddp --deterministic`; the norm for clipping is
/// taken from that whole gradient as ddp does; the optimiser then steps only this rank's
/// shard and the parameters are all-gathered (a copy). The optimiser update is element-wise,
/// so the final bytes equal `ddp --deterministic`'s at any P. The memory saving is then only in
/// the optimiser state (the tree sum keeps whole-gradient terms per micro-shard).
///
/// Cost per step and rank, n parameters: reduce-scatter (p-1)/p·n·β + all-gather (p-1)/p·n·β,
/// the same volume as one ring all-reduce; optimiser work and state n/p. A model with s state
/// elements adds one all-reduce of s floats (α·log p + s·β).

#include <cstdint>
#include <memory>

#include "hpctrain/train/bucketed_allreduce_sync.hpp"
#include "hpctrain/train/gradient_sync.hpp"
#include "hpctrain/train/shard_layout.hpp"

namespace hpctrain::train {

struct ZeroOptions {
  int stage = 1;                 ///< 1: optimiser state sharded; 2: gradients too
  DataParallelOptions parallel;  ///< buckets and wire type (the reduction is always reduce_scatter)
  bool deterministic = false;    ///< fixed-tree sum (stage 1 only)
  std::int64_t micro_shard = 16; ///< deterministic mode's micro-shard samples
};

class SharedStateSums;

class ZeroSync final : public GradientSync {
 public:
  /// Throws when `options` asks for what ZeRO here cannot do (stage other than 1 or 2;
  /// stage 2 with deterministic).
  ZeroSync(coll::Communicator& comm, models::Sequential<float>& model, const ZeroOptions& options,
           Timeline* timeline);
  ~ZeroSync() override;

  void begin_step(const OptimizerStep& step) override;
  void accumulate(const MicroBatch& micro) override { inner_->accumulate(micro); }
  double finish_step() override;
  double waited_inside_accumulate() const override { return inner_->waited_inside_accumulate() + forward_wait_s_; }
  double await_parameters() override;
  double step_loss() const override { return inner_->step_loss(); }
  /// deterministic: this rank's balanced block of the whole tree-summed gradient (every rank has it);
  /// otherwise the owned blocks at their places in the gradient buffer (apply() compacts them).
  std::int64_t count_nonfinite_gradient() const override;
  double apply(core::Optimizer<float>& optimizer, double lr, double clip_norm) override;
  bool overlap_observed() const override { return inner_->overlap_observed(); }
  bool gather_overlap_observed() const override { return gather_overlap_observed_; }
  HeldBytes held_bytes() const override;
  const ShardLayout* optimizer_shard() const override { return &layout_; }

 private:
  void launch_parameter_all_gather();
  /// Waits for the queued all-gathers whose first layer is at most `layer` (all: SIZE_MAX);
  /// returns the seconds waited.
  double wait_for_parameters(std::size_t layer);
  /// The before-layer hook: waits for layer `layer`'s parameters, and notes when a later
  /// layer's all-gather is still running as this layer computes.
  void before_layer_forward(std::size_t layer);

  coll::Communicator& comm_;
  models::Sequential<float>& model_;
  ZeroOptions options_;
  Timeline* timeline_;
  std::vector<GradientBucket> buckets_;
  ShardLayout layout_;
  core::Vec<float> param_shard_;  ///< the parameter buffer's front, where compact() puts the shard
  core::Vec<float> grad_shard_;   ///< the gradient buffer's front, where compact() puts the shard
  core::Vec<float> trainable_shard_;  ///< the optimiser's mask of the shard (empty: no state)
  std::unique_ptr<GradientSync> inner_;  ///< computes the gradient: bucketed or tree sum
  std::unique_ptr<SharedStateSums> state_sums_;  ///< models with state, not deterministic
  bool record_ = false;
  std::vector<std::size_t> gather_order_;    ///< bucket indices by first layer (forward order)
  std::vector<coll::Work> gathers_;          ///< queued all-gathers, in gather_order_
  std::size_t gathers_done_ = 0;             ///< of gathers_, waited for
  double forward_wait_s_ = 0.0;              ///< this step's waits in the before-layer hook
  bool gather_overlap_observed_ = false;
};

}  // namespace hpctrain::train
