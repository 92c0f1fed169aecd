#pragma once
/// @file
/// Data-parallel gradient synchronisation with buckets overlapped with backward.
///
/// Gradients live in the model's one contiguous buffer, so a bucket is a range of it: no
/// copies. Buckets are formed in reverse registration order (the order backward produces
/// them); the first is small so communication starts early, the rest about `bucket_bytes`.
/// The backward hook launches a bucket's non-blocking all-reduce as soon as the layer that
/// completes it has run; finish() waits for all before the optimiser step.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/models/sequential.hpp"
#include "hpctrain/train/timeline.hpp"

namespace hpctrain::train {

struct DataParallelOptions {
  std::size_t first_bucket_bytes = std::size_t{256} << 10;  ///< small: communication starts early
  std::size_t bucket_bytes = std::size_t{25} << 20;       ///< PyTorch DDP's default
  coll::Algorithm algorithm = coll::Algorithm::automatic;
};

struct GradientBucket {
  std::int64_t offset = 0;  ///< first element in the gradient buffer
  std::int64_t count = 0;
  std::size_t ready_after_layer = 0;  ///< complete once this layer's backward has run
};

class DataParallel {
 public:
  DataParallel(coll::Communicator& comm, models::Sequential<float>& model,
               DataParallelOptions options = {}, Timeline* timeline = nullptr);

  /// Checks every rank built the same model (parameter count and a hash of names and shapes;
  /// a mismatch throws naming the rank), then copies rank 0's parameters to every rank.
  void broadcast_parameters();

  /// Call before backward. With sync false (gradient accumulation) no bucket is launched.
  void begin_step(bool sync);
  /// The hook to pass to Sequential::backward.
  std::function<void(std::size_t)> backward_hook();
  /// Launches buckets the hook has not launched (e.g. a rank with no samples this step) and
  /// waits for all; returns the seconds spent waiting (exposed communication).
  double finish();

  const std::vector<GradientBucket>& buckets() const noexcept { return buckets_; }
  /// When each bucket's all-reduce ran in the last synchronised step (for overlap checks).
  const std::vector<std::pair<std::chrono::steady_clock::time_point,
                              std::chrono::steady_clock::time_point>>& last_step_spans() const {
    return spans_;
  }

 private:
  void launch_ready(std::size_t layer_done);
  void launch(std::size_t bucket);

  coll::Communicator& comm_;
  models::Sequential<float>& model_;
  DataParallelOptions options_;
  Timeline* timeline_;
  std::vector<GradientBucket> buckets_;
  std::vector<coll::Work> work_;
  std::vector<std::pair<std::chrono::steady_clock::time_point, std::chrono::steady_clock::time_point>> spans_;
  std::size_t next_bucket_ = 0;
  bool sync_ = true;
};

}  // namespace hpctrain::train
