#pragma once
/// @file
/// DeviceBatch: a host batch (io::Batch, from io::read_batch or io::Prefetcher) copied into the
/// model's input tensor and label view, reusing their device storage from step to step.

#include <cstddef>
#include <memory>

#include "hpctrain/core/copy_stream.hpp"
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

  /// load_rows() without waiting: in a GPU build the rows go to pinned host memory, then to the
  /// device on a stream of this batch's own, overlapping kernels already queued on the compute
  /// stream; wait() before anything reads x or labels, and let the kernels that read this
  /// batch's previous rows finish before calling it (Kokkos::fence()). In a host build the copy
  /// is done when it returns.
  void start_load_rows(const io::Batch& b, std::size_t first, std::size_t rows, const core::Shape& sample_shape);
  /// Blocks until start_load_rows()'s copies have finished.
  void wait();

  /// Rows [first, first + rows) of this batch: views, no copy.
  DeviceBatch rows(std::int64_t first, std::int64_t count) const;

 private:
  std::shared_ptr<core::CopyStream> copy_;  ///< made at the first start_load_rows on a GPU build
  Kokkos::View<float*, core::StagingSpace> staged_x_;
  Kokkos::View<std::int32_t*, core::StagingSpace> staged_labels_;
};

}  // namespace hpctrain::train
