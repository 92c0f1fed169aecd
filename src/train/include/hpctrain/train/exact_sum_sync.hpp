#pragma once
/// @file
/// ExactSumSync: deterministic training's gradient strategy (docs/deterministic.md). Each
/// global batch is cut into micro-shards of `micro_shard` samples (io::EpochPlan with that
/// granule hands every rank whole micro-shards); each micro-shard runs forward and backward on
/// its own and its gradient is kept as one term of an exact 64-bit fixed-point sum
/// (coll::ReproducibleSum, one scale per parameter tensor). At the step's end the terms of all
/// micro-batches are summed exactly over the ranks, so the summed gradient, and the loss
/// (one slot per micro-shard, summed in micro-shard order), depend only on the set of
/// micro-shards, which the global batch fixes: the bytes do not depend on P, the algorithm or
/// the transport. Costs: one device-to-host copy per micro-shard, no overlap with backward.

#include <cstdint>
#include <memory>
#include <vector>

#include "hpctrain/train/gradient_sync.hpp"

namespace hpctrain::train {

/// Micro-shards of `batch_size` samples, `micro_shard` each (the last may be shorter).
std::int64_t micro_shard_count(std::int64_t batch_size, std::int64_t micro_shard);

class ExactSumSync final : public GradientSync {
 public:
  ExactSumSync(coll::Communicator& comm, models::Sequential<float>& model, std::int64_t micro_shard,
               coll::Algorithm algorithm, Timeline* timeline);
  ~ExactSumSync() override;

  void begin_step(const OptimizerStep& step) override;
  void accumulate(const MicroBatch& micro) override;
  double finish_step() override;
  double step_loss() const override { return loss_; }
  std::int64_t count_nonfinite_gradient() const override;
  double apply(core::Optimizer<float>& optimizer, double lr, double clip_norm) override;
  bool overlap_observed() const override { return false; }
  /// The model's buffers (the per-micro-shard terms of the exact sum are not counted).
  HeldBytes held_bytes() const override;

 private:
  class Terms;  // the fixed-point terms of one step
  struct Pass;  // the forward/backward workspace

  coll::Communicator& comm_;
  models::Sequential<float>& model_;
  core::Vec<float> trainable_;  ///< the optimiser's mask (empty: a model without state)
  std::int64_t micro_shard_;
  coll::Algorithm algorithm_;
  Timeline* timeline_;
  std::unique_ptr<Terms> terms_;
  std::unique_ptr<Pass> pass_;
  OptimizerStep step_;
  std::size_t micro_ = 0;
  std::int64_t term_base_ = 0;     ///< micro-shards of the step's earlier micro-batches
  std::vector<double> losses_;     ///< one slot per micro-shard of the step
  double loss_ = 0.0;
  bool record_ = false;
};

}  // namespace hpctrain::train
