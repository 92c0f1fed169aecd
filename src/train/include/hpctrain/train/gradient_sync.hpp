#pragma once
/// @file
/// GradientSync: how one optimiser step's gradient is computed on this rank's samples, combined
/// over the ranks and applied. It is the one interface the training loop talks to; the
/// strategies are BucketedAllreduceSync (data parallel, all-reduce overlapped with backward),
/// DeterministicSync (deterministic: the bytes do not depend on P) and ZeroSync (ZeRO-1/2): its
/// backward hook reduce-scatters buckets instead of all-reducing them, finish_step() leaves
/// each rank its shard of the summed gradient, apply() steps the optimiser on that shard only
/// (it owns the sharded optimiser state and computes the gradient norm from the shards' sums
/// of squares; a model's state slots are first all-reduced so every rank updates the running
/// statistics) and all-gathers the parameters.
///
/// One optimiser step, as the loop drives it:
///
///     sync.begin_step(step);                 // zeroes the gradients
///     for each micro-batch of the step:      // --accumulate global batches
///       sync.accumulate(micro_batch);        // forward + backward of this rank's share
///     exposed_s = sync.finish_step();        // every rank holds the summed gradient
///     sync.apply(optimizer, lr, clip_norm);  // the parameter update
///
/// Scaling contract of every strategy: each sample's loss is divided by OptimizerStep::samples()
/// (the samples of the whole step over all ranks, never the per-rank count) and the gradients
/// are summed over the ranks, never averaged. The result is the gradient of the step's mean
/// loss, the same at any rank count.

#include <cstdint>
#include <memory>
#include <vector>

#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/core/optimizer.hpp"
#include "hpctrain/io/prefetcher.hpp"
#include "hpctrain/models/sequential.hpp"
#include "hpctrain/train/device_batch.hpp"
#include "hpctrain/train/shard_layout.hpp"
#include "hpctrain/train/timeline.hpp"

namespace hpctrain::train {

/// The global batches that make up one optimiser step.
struct OptimizerStep {
  std::int64_t index = 0;                      ///< optimiser steps taken before this one
  std::vector<std::int64_t> batch_sizes;       ///< B_b of each micro-batch, in order (EpochPlan)
  /// Samples of the step over all ranks and micro-batches: every sample's loss divisor.
  std::int64_t samples() const noexcept;
};

/// This rank's share of one global batch of the step.
struct MicroBatch {
  const io::Batch& batch;            ///< this rank's samples (batch.count may be 0)
  std::int64_t offset_in_batch = 0;  ///< position of this rank's first sample in the global batch
  std::int64_t sample_position = 0;  ///< EpochPlan::sample_position of that sample (dropout stream)
  bool record = false;               ///< add compute spans to the timeline
  /// `batch` already in the model's memory, all rows, its copy finished (the trainer copies the
  /// next micro-batch while this one computes); null: the strategy copies `batch` itself.
  const DeviceBatch* device = nullptr;
};

class GradientSync {
 public:
  virtual ~GradientSync() = default;
  GradientSync() = default;
  GradientSync(const GradientSync&) = delete;
  GradientSync& operator=(const GradientSync&) = delete;

  /// Starts `step`: zeroes the model's gradients.
  virtual void begin_step(const OptimizerStep& step) = 0;
  /// Forward and backward of this rank's share of the next micro-batch of the step (the
  /// micro-batches come in the order of OptimizerStep::batch_sizes); gradients add up.
  virtual void accumulate(const MicroBatch& micro) = 0;
  /// Collective, after the step's last micro-batch: every rank holds the sum over all ranks of
  /// the gradient (ZeroSync: of its shard of it). Returns the seconds this rank waited for
  /// communication in the step (exposed), those inside accumulate() included.
  virtual double finish_step() = 0;
  /// The part of finish_step()'s seconds spent inside accumulate() (waits between micro-batches,
  /// ZeroSync's waits for parameters in forward), so the trainer can count it as communication
  /// and not also as compute.
  virtual double waited_inside_accumulate() const { return 0.0; }
  /// This rank's share of the step's mean loss, valid after finish_step(): the shares of all
  /// ranks sum to the mean loss of the step's samples.
  virtual double step_loss() const = 0;
  /// NaN or infinite elements in this rank's part of the step's summed gradient, after
  /// finish_step(): its balanced block of a gradient every rank holds whole
  /// (count_nonfinite_in_my_block), or a sharded strategy's shard. The trainer checks it is 0
  /// on every rank before apply(); the parts cover the gradient once.
  virtual std::int64_t count_nonfinite_gradient() const = 0;
  /// The parameter update: clips the summed gradient to the global L2 norm `clip_norm`
  /// (0: no clipping), sets the learning rate `lr` and steps `optimizer`. Returns with the
  /// seconds this rank waited for communication inside. This rank's parameters are written
  /// (fenced); a sharded strategy's all-gather of the others may still be in flight: the next
  /// forward waits for each layer's (Sequential::set_before_layer_forward), and anything else
  /// that reads the parameters calls await_parameters() first.
  virtual double apply(core::Optimizer<float>& optimizer, double lr, double clip_norm) = 0;
  /// Waits until every rank's parameters are complete (a sharded strategy's all-gather from
  /// the last apply()); returns the seconds waited. Call before reading the parameters outside
  /// a forward (checkpoints, checksums, export).
  virtual double await_parameters() { return 0.0; }
  /// Whether communication of some step started before that step's backward ended.
  virtual bool overlap_observed() const = 0;
  /// Whether some forward ran a layer while a later layer's parameter all-gather was still in
  /// flight (a sharded strategy's overlap with the next forward; false for the others).
  virtual bool gather_overlap_observed() const { return false; }

  /// Bytes of parameters and gradients this rank holds: the model's buffers plus any the
  /// strategy adds (shards, copies). Optimiser state is counted from the optimiser itself.
  struct HeldBytes {
    std::uint64_t parameters = 0;
    std::uint64_t gradients = 0;
  };
  virtual HeldBytes held_bytes() const = 0;
  /// The part of the flat parameter buffer whose optimiser state this rank holds and steps;
  /// null when it holds all of it (replicated state). Checkpoints write and read that part.
  virtual const ShardLayout* optimizer_shard() const { return nullptr; }
};

}  // namespace hpctrain::train
