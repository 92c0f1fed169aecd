#pragma once
/// @file
/// DeviceBatch: a host batch (io::Batch, from io::read_batch or io::Prefetcher) copied into the
/// model's input tensor and label view, reusing their device storage from step to step.

#include <cstddef>

#include "hpctrain/core/loss.hpp"
#include "hpctrain/core/tensor.hpp"
#include "hpctrain/io/prefetcher.hpp"

namespace hpctrain::train {

struct DeviceBatch {
  core::Tensor<float> x;  ///< [rows, sample shape...]
  core::Labels labels;    ///< [rows]

  /// All rows of `b`; `sample_shape` is the model's input shape without the batch.
  void load(const io::Batch& b, const core::Shape& sample_shape);
  /// Rows [first, first + rows) of `b` only (one micro-shard).
  void load_rows(const io::Batch& b, std::size_t first, std::size_t rows, const core::Shape& sample_shape);
};

}  // namespace hpctrain::train
