#pragma once
// The training forward pass and its loss on a loaded batch, ready for backward: the part of a
// micro-batch (or micro-shard) the gradient strategies share.

#include <cstdint>

#include "hpctrain/core/loss.hpp"
#include "hpctrain/models/sequential.hpp"
#include "hpctrain/train/device_batch.hpp"

namespace hpctrain::train {

struct TrainingPass {
  DeviceBatch input;
  core::Tensor<float> dlogits;  ///< dL/dlogits after forward_loss: the input to backward

  /// Forward in training mode with dropout drawn at (step, sample_position); returns the
  /// softmax cross-entropy summed over the loaded rows and divided by `loss_divisor` (the
  /// samples of the whole step over all ranks), and leaves its gradient in `dlogits`.
  double forward_loss(models::Sequential<float>& model, std::int64_t step, std::int64_t sample_position,
                      std::int64_t loss_divisor) {
    model.set_rng_position(static_cast<std::uint64_t>(step), sample_position);
    core::Tensor<float> logits = model.forward(input.x, /*train=*/true);
    core::ensure_shape(dlogits, "hpctrain::train::dlogits", logits.shape);
    return core::softmax_cross_entropy(logits, input.labels, loss_divisor, dlogits);
  }
};

}  // namespace hpctrain::train
