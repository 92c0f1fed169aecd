#pragma once
/// @file
/// DataParallel: gradient all-reduce in buckets, overlapped with backward, on a parameter and
/// gradient buffer pair (ParameterBuffers; models::Sequential provides one).
///
/// Contract: after finish() every rank's gradient buffer holds the SUM of all ranks' gradient
/// buffers (ReduceOp::sum; nothing is divided by P). For that sum to be the gradient of the
/// mean loss, every rank divides its per-sample losses by the global batch (the samples of the
/// step over all ranks, io::EpochPlan::global_batch_size) before backward, as
/// core::softmax_cross_entropy does with its `global_batch` argument. Parameters are never
/// touched except by broadcast_parameters().
///
/// Gradients live in one contiguous buffer, so a bucket is a range of it: no copies. Buckets
/// are formed in reverse registration order (the order backward produces them); the first is
/// small so communication starts early, the rest about `bucket_bytes`. The backward hook
/// launches a bucket's non-blocking all-reduce as soon as the layer that completes it has run;
/// finish() waits for all before the optimiser step.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/models/sequential.hpp"
#include "hpctrain/train/parameter_buffers.hpp"
#include "hpctrain/train/timeline.hpp"

namespace hpctrain::train {

/// What a bucket's collective leaves in the gradient buffer.
enum class BucketReduction {
  allreduce,       ///< the whole bucket holds the sum over ranks (data parallel)
  reduce_scatter,  ///< only this rank's block of the bucket's balanced partition does (ZeRO;
                   ///< coll::balanced_block(bucket.count, P, rank)); the rest is unspecified
};

/// How gradients are cast to a 16-bit wire type (tests only: a deliberately wrong cast).
enum class WireCast {
  round_to_nearest,         ///< IEEE round-to-nearest-even (the real one)
  truncated_exponent_test,  ///< keeps only the exponent's low 5 bits: must fail accuracy tests
};

struct DataParallelOptions {
  std::size_t first_bucket_bytes = std::size_t{256} << 10;  ///< small: communication starts early
  std::size_t bucket_bytes = std::size_t{25} << 20;       ///< PyTorch DDP's default
  coll::Algorithm algorithm = coll::Algorithm::automatic;  ///< of the all-reduce (reduce-scatter: ring)
  BucketReduction reduction = BucketReduction::allreduce;
  /// Type on the wire: f32, or bf16 / f16 (each bucket cast once before its collective; every
  /// addition inside the reduction is done in f32 and rounded to the wire type per hop; the
  /// result cast back to f32 after the wait).
  coll::DataType wire_type = coll::DataType::f32;
  WireCast wire_cast = WireCast::round_to_nearest;
  /// Error feedback (16-bit wire types only; Seide et al. 2014, Karimireddy et al. 2019): each
  /// rank keeps the rounding error of its cast, e = (g + e) − float(wire(g + e)), and adds it to
  /// the same elements before their next cast, so what this rank has sent sums to what it
  /// computed, up to one rounding. The reduction's own per-hop roundings are not fed back.
  /// Costs one f32 residual per gradient element (4 bytes each, counted in gradient_bytes).
  bool error_feedback = false;
};

struct GradientBucket {
  std::int64_t offset = 0;  ///< first element in the gradient buffer
  std::int64_t count = 0;
  std::size_t ready_after_layer = 0;  ///< complete once this layer's backward has run
};

/// The buckets DataParallel forms for `tensors` (see the file comment). Throws when a bucket
/// size is zero.
std::vector<GradientBucket> plan_gradient_buckets(const std::vector<models::ParameterInfo>& tensors,
                                                  const DataParallelOptions& options);

class DataParallel {
 public:
  DataParallel(coll::Communicator& comm, ParameterBuffers buffers, DataParallelOptions options = {},
               Timeline* timeline = nullptr);
  DataParallel(coll::Communicator& comm, const models::Sequential<float>& model,
               DataParallelOptions options = {}, Timeline* timeline = nullptr)
      : DataParallel(comm, ParameterBuffers::of(model), options, timeline) {}

  /// Collective: train::broadcast_parameters on this object's buffers.
  void broadcast_parameters();

  /// Call before backward. With sync false (gradient accumulation) no bucket is launched.
  void begin_step(bool sync);
  /// The hook to pass to Sequential::backward.
  std::function<void(std::size_t)> backward_hook();
  /// Launches buckets the hook has not launched (e.g. a rank with no samples this step) and
  /// waits for all; returns the seconds spent waiting (exposed communication). Collective when
  /// the step synchronises; returns 0 at once otherwise.
  double finish();

  const std::vector<GradientBucket>& buckets() const noexcept { return buckets_; }
  /// Bytes of the error-feedback residuals (0 without error feedback).
  std::uint64_t residual_bytes() const noexcept;
  /// When each bucket's all-reduce ran in the last synchronised step (for overlap checks).
  const std::vector<std::pair<std::chrono::steady_clock::time_point,
                              std::chrono::steady_clock::time_point>>& last_step_spans() const {
    return spans_;
  }

 private:
  void launch_ready(std::size_t layer_done);
  void launch(std::size_t bucket);
  /// After bucket k's collective: the 16-bit result cast back into the gradient buffer.
  void unpack(std::size_t bucket);

  coll::Communicator& comm_;
  ParameterBuffers buffers_;
  DataParallelOptions options_;
  Timeline* timeline_;
  std::vector<GradientBucket> buckets_;
  std::vector<coll::Work> work_;
  std::vector<std::vector<std::uint16_t>> wire_;  ///< per bucket, for a 16-bit wire type
  std::vector<std::vector<float>> residual_;      ///< per bucket, with error feedback
  std::vector<std::pair<std::chrono::steady_clock::time_point, std::chrono::steady_clock::time_point>> spans_;
  std::size_t next_bucket_ = 0;
  bool sync_ = true;
};

}  // namespace hpctrain::train
