#pragma once
// The training forward pass and its loss on a loaded batch, ready for backward: the part of a
// micro-batch (or micro-shard) the gradient strategies share.

#include <algorithm>
#include <cstdint>
#include <utility>

#include "hpctrain/core/loss.hpp"
#include "hpctrain/models/sequential.hpp"
#include "hpctrain/train/device_batch.hpp"
#include "hpctrain/train/gradient_sync.hpp"

namespace hpctrain::train {

struct TrainingPass {
  DeviceBatch input;            ///< what forward_loss reads: views of `loaded` or of the trainer's copy
  DeviceBatch loaded;           ///< rows this pass copied from a host batch itself
  core::Tensor<float> dlogits;  ///< dL/dlogits after forward_loss: the input to backward

  /// `input` := rows [first, first + rows) of the micro-batch: views of the trainer's copy when
  /// it made one (MicroBatch::device), else copied from the host batch into `loaded`.
  void take_rows(const MicroBatch& micro, std::size_t first, std::size_t rows, const core::Shape& sample_shape) {
    if (micro.device != nullptr) {
      input = micro.device->rows(static_cast<std::int64_t>(first), static_cast<std::int64_t>(rows));
    } else {
      loaded.load_rows(micro.batch, first, rows, sample_shape);
      input = loaded;
    }
  }

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

  /// forward_loss() over a pass of leaves of `leaf_rows` rows (the last may be shorter), the
  /// model set to those leaves (Sequential::set_gradient_leaves): losses[l] is leaf l's loss as
  /// forward_loss() on its rows alone returns it; dlogits holds every row's gradient.
  void forward_leaf_losses(models::Sequential<float>& model, std::int64_t step, std::int64_t sample_position,
                           std::int64_t loss_divisor, std::int64_t leaf_rows, double* losses) {
    model.set_rng_position(static_cast<std::uint64_t>(step), sample_position);
    core::Tensor<float> logits = model.forward(input.x, /*train=*/true);
    core::ensure_shape(dlogits, "hpctrain::train::dlogits", logits.shape);
    const std::int64_t rows = logits.dim(0);
    const std::int64_t classes = rows == 0 ? 0 : logits.size() / rows;
    for (std::int64_t first = 0; first < rows; first += leaf_rows) {
      const std::int64_t r = std::min(leaf_rows, rows - first);
      const core::Shape shape{r, classes};
      *losses++ = core::softmax_cross_entropy(
          core::Tensor<float>(core::slice(logits.data, first * classes, r * classes), shape),
          core::Labels(Kokkos::subview(input.labels, std::make_pair(first, first + r))), loss_divisor,
          core::Tensor<float>(core::slice(dlogits.data, first * classes, r * classes), shape));
    }
  }
};

}  // namespace hpctrain::train
