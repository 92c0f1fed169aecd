#pragma once
/// @file
/// The memory a training run needs, estimated before its large allocations, and the check that
/// refuses a run which would not fit (instead of meeting the kernel's OOM killer mid-step).
///
/// What is counted, per rank (float32 everywhere):
///   parameters, gradients   4 B per parameter each (allocated after this check: the model is
///                           planned, models::plan_model, and finalised once the run fits)
///   optimiser state         SGD with momentum: 4 B per parameter; AdamW: 8 B; ZeRO (zero1,
///                           zero2): divided over the ranks. --deterministic adds the tree sum's
///                           held nodes and received blocks (coll::TreeSum::workspace_floats; at
///                           micro-shards of 16 and batch 128: 3 gradients' worth at P = 1,
///                           2.5 at P = 2).
///   activations             every layer's output for the per-rank batch, kept for backward, and
///                           as much again for the gradients flowing back; max-pool argmax
///                           (8 B per pooled element); the batch itself
///   workspace               per convolution, for the backend core::conv_backend() picks:
///                           portable: the im2col matrices (two of C K K x N Ho Wo) and the
///                           output transpose (F x N Ho Wo); oneDNN: reordered copies of the
///                           weights, input and output and of their gradients. (A CNN with
///                           kernel 99 at batch 32 per rank: portable 15.7 GiB, which is what
///                           the OOM killer met; oneDNN ran it in 1.1 GB of RSS.)
///   data                    the prefetch queue (--prefetch batches of samples)
/// The batch is the larger of the per-rank training batch (ceil(global / P), or the micro-shard
/// in deterministic mode) and evaluation's 256, when there is evaluation data.

#include <cstdint>
#include <string>

#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/models/sequential.hpp"
#include "hpctrain/train/trainer.hpp"

namespace hpctrain::train {

/// Bytes per rank, by what holds them.
struct MemoryEstimate {
  std::uint64_t parameters = 0;
  std::uint64_t gradients = 0;
  std::uint64_t optimizer_state = 0;
  std::uint64_t activations = 0;
  std::uint64_t workspace = 0;
  std::uint64_t data = 0;
  std::int64_t batch = 0;  ///< the per-rank batch the activations and workspace are for

  std::uint64_t total() const noexcept;
  /// "parameters 80.2 MiB, gradients 80.2 MiB, ..., per-rank batch 32"
  std::string breakdown() const;
};

/// The estimate for training `model` with `o` on `world` ranks (see the file comment).
/// `with_eval`: evaluation batches of 256 run too.
MemoryEstimate estimate_training_memory(models::Sequential<float>& model, const TrainOptions& o, int world,
                                        bool with_eval);

/// Collective: every rank checks that `ranks_on_node` x `estimate` fits in what its node (or
/// cgroup) has available (io::available_memory), before the parameters are allocated. When one
/// does not fit, every rank throws; the lowest such
/// rank's message (estimate, breakdown, what is available and where that figure comes from)
/// is the one printed. Nothing is refused when the available memory cannot be read.
void require_memory_fits(coll::Communicator& comm, const MemoryEstimate& estimate, int ranks_on_node);

}  // namespace hpctrain::train
