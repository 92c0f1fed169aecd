#pragma once
/// @file
/// BucketedAllreduceSync: the data-parallel gradient strategy. Each micro-batch runs forward
/// and backward on this rank's whole share; on the step's last micro-batch the backward hook
/// launches DataParallel's bucket all-reduces while earlier layers still back-propagate
/// (earlier micro-batches only accumulate, without communication). Gradients are summed over
/// the ranks (DataParallel's contract); the result's bits depend on P and the algorithm.

#include <chrono>
#include <memory>

#include "hpctrain/train/data_parallel.hpp"
#include "hpctrain/train/gradient_sync.hpp"

namespace hpctrain::train {

class BucketedAllreduceSync final : public GradientSync {
 public:
  BucketedAllreduceSync(coll::Communicator& comm, models::Sequential<float>& model, DataParallelOptions options,
                        Timeline* timeline);
  ~BucketedAllreduceSync() override;

  void begin_step(const OptimizerStep& step) override;
  void accumulate(const MicroBatch& micro) override;
  double finish_step() override;
  double step_loss() const override { return loss_; }
  void apply(core::Optimizer<float>& optimizer, double lr, double clip_norm) override;
  bool overlap_observed() const override { return overlap_observed_; }

 private:
  struct Pass;  // the forward/backward workspace (device_batch.hpp)

  models::Sequential<float>& model_;
  Timeline* timeline_;
  DataParallel data_parallel_;
  std::unique_ptr<Pass> pass_;
  OptimizerStep step_;
  std::size_t micro_ = 0;
  double loss_ = 0.0;
  std::chrono::steady_clock::time_point backward_end_{};
  bool last_had_samples_ = false;
  bool overlap_observed_ = false;
};

}  // namespace hpctrain::train
