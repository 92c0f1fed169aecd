#pragma once
/// @file
/// DeterministicSync: deterministic training's gradient strategy (docs/deterministic.md). Each
/// global batch is cut into micro-shards of `micro_shard` samples (io::EpochPlan with that
/// granule hands every rank whole micro-shards); each micro-shard runs forward and backward on
/// its own and its gradient is one term of a coll::TreeSum, which adds the step's terms (of all
/// micro-batches) over a fixed binary tree on the micro-shard index. So the summed gradient, and
/// the loss (one slot per micro-shard, summed in micro-shard order), depend only on the
/// micro-shards, which the global batch fixes: the bytes do not depend on P, the algorithm or
/// the transport.
///
/// Grouped passes: where every layer supports leaf rows (Sequential::supports_gradient_leaves:
/// the MLPs), a rank runs each aligned node of its micro-shards (coll::maximal_nodes of a
/// micro-batch's micro-shards) as one forward/backward, the model told that its leaves are the
/// micro-shards: the node's gradient comes out as the tree of the micro-shards' gradients
/// (core::gemm_tn_leaf_tree) and goes to the TreeSum as one node. Same bits as a pass per
/// micro-shard, without a whole gradient vector per micro-shard or the adds between them.
/// HPCTRAIN_DETERMINISTIC_PASSES=micro-shard runs a pass per micro-shard always (comparisons,
/// tests); =grouped (the default) groups where the model allows. Costs (per micro-shard passes;
/// grouped passes replace the whole vector per micro-shard and its add by adds in cache): the micro-shards' own forward/backward passes, one add (or copy) of
/// each term, a ring all-reduce's bytes when each rank's micro-shards form an aligned subtree.
/// Host gradients: the sum is finished in segments (DataParallel's buckets), each started as
/// soon as the rank's last backward of the step has written it (TreeSum::finish_segment; same
/// bits). Device gradients: one device-to-host copy per micro-shard, the sum after the backward.

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "hpctrain/collectives/tree_sum.hpp"
#include "hpctrain/train/data_parallel.hpp"
#include "hpctrain/train/gradient_sync.hpp"

namespace hpctrain::train {

/// Micro-shards of `batch_size` samples, `micro_shard` each (the last may be shorter).
std::int64_t micro_shard_count(std::int64_t batch_size, std::int64_t micro_shard);

/// The TreeSum terms of an optimiser step: its micro-shards, numbered over the step.
struct MicroShardTerms {
  std::int64_t total = 0;                             ///< micro-shards of the whole step
  std::vector<std::vector<coll::TermRange>> ranges;   ///< rank r's: those io::granule_slice gives it
};
/// The terms of a step of `batch_sizes` global batches cut into micro-shards of `micro_shard`.
MicroShardTerms micro_shard_terms(const std::vector<std::int64_t>& batch_sizes, std::int64_t micro_shard, int world);

/// Whether deterministic training runs grouped passes where the model allows
/// (HPCTRAIN_DETERMINISTIC_PASSES: grouped, the default, or micro-shard; throws on another value).
bool grouped_deterministic_passes_from_environment();

class DeterministicSync final : public GradientSync {
 public:
  /// `parallel`'s bucket sizes cut the gradient into the segments the tree sum finishes while
  /// a rank's last pass of the step is still back-propagating (DataParallel's buckets).
  DeterministicSync(coll::Communicator& comm, models::Sequential<float>& model, std::int64_t micro_shard,
                    Timeline* timeline, const DataParallelOptions& parallel = {});
  ~DeterministicSync() override;

  void begin_step(const OptimizerStep& step) override;
  void accumulate(const MicroBatch& micro) override;
  double finish_step() override;
  double step_loss() const override { return loss_; }
  std::int64_t count_nonfinite_gradient() const override;
  double apply(core::Optimizer<float>& optimizer, double lr, double clip_norm) override;
  bool overlap_observed() const override { return overlap_observed_; }
  /// The model's buffers (the tree sum's held nodes are not counted).
  HeldBytes held_bytes() const override;

 private:
  /// accumulate() with grouped passes: a forward/backward per aligned node of micro-shards.
  void accumulate_grouped(const MicroBatch& micro, bool last_micro_batch);
  /// The backward of a pass over `node`, and the node to the sum; `last`: this rank's last pass
  /// of the step, whose backward starts finishing the sum's segments.
  void backward_and_collect(const coll::TreeNode& node, bool last);

  class Terms;  // the tree sum of one step's micro-shard gradients
  struct Pass;  // the forward/backward workspace

  coll::Communicator& comm_;
  models::Sequential<float>& model_;
  core::Vec<float> trainable_;  ///< the optimiser's mask (empty: a model without state)
  std::int64_t micro_shard_;
  Timeline* timeline_;
  std::unique_ptr<Terms> terms_;
  std::unique_ptr<Pass> pass_;
  OptimizerStep step_;
  std::size_t micro_ = 0;
  std::int64_t term_base_ = 0;     ///< micro-shards of the step's earlier micro-batches
  std::vector<double> losses_;     ///< one slot per micro-shard of the step
  std::int64_t total_terms_ = 0;   ///< micro-shards of the step (all ranks)
  bool grouped_ = false;           ///< a pass per node of micro-shards (see above)
  std::vector<GradientBucket> segments_;  ///< the tree sum's segments, last layers first
  std::size_t next_segment_ = 0;   ///< segments before it are finishing
  std::chrono::steady_clock::time_point backward_end_;
  bool overlap_observed_ = false;
  double loss_ = 0.0;
  bool record_ = false;
};

}  // namespace hpctrain::train
