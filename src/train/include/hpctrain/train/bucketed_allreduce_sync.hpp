#pragma once
/// @file
/// BucketedAllreduceSync: the data-parallel gradient strategy. Each micro-batch runs forward
/// and backward on this rank's whole share; on the step's last micro-batch the backward hook
/// launches DataParallel's bucket all-reduces while earlier layers still back-propagate
/// (earlier micro-batches only accumulate, without communication). Gradients are summed over
/// the ranks (DataParallel's contract); the result's bits depend on P and the algorithm.
///
/// ZeroSync reuses it for the gradient half of ZeRO: with BucketReduction::reduce_scatter
/// each rank keeps only its blocks of the sum, and with ReduceEvery::micro_batch (zero2) every
/// micro-batch is reduced on its own; before the next micro-batch's backward adds into the same
/// buffer, `between_micro_batches` prepares it (zero2: ShardLayout::clear_unowned, so the
/// summed blocks stay and the rest is zero). Without it the buffer is zeroed.

#include <chrono>
#include <functional>
#include <memory>

#include "hpctrain/train/data_parallel.hpp"
#include "hpctrain/train/gradient_sync.hpp"

namespace hpctrain::train {

/// When the buckets are reduced: once per optimiser step (on its last micro-batch), or after
/// every micro-batch.
enum class ReduceEvery { step, micro_batch };

class BucketedAllreduceSync final : public GradientSync {
 public:
  BucketedAllreduceSync(coll::Communicator& comm, models::Sequential<float>& model, DataParallelOptions options,
                        Timeline* timeline, ReduceEvery every = ReduceEvery::step,
                        std::function<void()> between_micro_batches = {});
  ~BucketedAllreduceSync() override;

  void begin_step(const OptimizerStep& step) override;
  void accumulate(const MicroBatch& micro) override;
  double finish_step() override;
  double waited_inside_accumulate() const override { return waited_between_micro_batches_s_; }
  double step_loss() const override { return loss_; }
  std::int64_t count_nonfinite_gradient() const override;
  double apply(core::Optimizer<float>& optimizer, double lr, double clip_norm) override;
  bool overlap_observed() const override { return overlap_observed_; }
  HeldBytes held_bytes() const override;

 private:
  struct Pass;  // the forward/backward workspace (device_batch.hpp)
  void wait_for_reduction();  // waits for the buckets and records their overlap
  void record_overlap();

  models::Sequential<float>& model_;
  core::Vec<float> trainable_;  ///< the optimiser's mask (empty: a model without state)
  int rank_, ranks_;  ///< this rank's block of the summed gradient is the part it checks
  Timeline* timeline_;
  DataParallel data_parallel_;
  std::unique_ptr<Pass> pass_;
  ReduceEvery every_;
  std::function<void()> between_micro_batches_;
  OptimizerStep step_;
  std::size_t micro_ = 0;
  double loss_ = 0.0;
  double waited_s_ = 0.0;  ///< this step's waits (ReduceEvery::micro_batch: earlier micro-batches too)
  double waited_between_micro_batches_s_ = 0.0;  ///< the part of waited_s_ inside accumulate()
  std::chrono::steady_clock::time_point backward_end_{};
  bool last_had_samples_ = false;
  bool gradients_pending_ = false;  ///< begin_gradients() ran and no backward or zeroing since
  bool overlap_observed_ = false;
};

}  // namespace hpctrain::train
