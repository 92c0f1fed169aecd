#include "hpctrain/train/device_batch.hpp"

#include <Kokkos_Core.hpp>

#include <cstring>
#include <string>

#include "hpctrain/base/error.hpp"

namespace hpctrain::train {

namespace {
template <class T>
using HostView = Kokkos::View<const T*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
}  // namespace

void DeviceBatch::load(const io::Batch& b, const core::Shape& sample_shape) {
  load_rows(b, 0, b.count, sample_shape);
}

void DeviceBatch::load_rows(const io::Batch& b, std::size_t first, std::size_t rows, const core::Shape& sample_shape) {
  start_load_rows(b, first, rows, sample_shape);
  wait();
}

void DeviceBatch::start_load_rows(const io::Batch& b, std::size_t first, std::size_t rows,
                                  const core::Shape& sample_shape) {
  HPCTRAIN_REQUIRE(first + rows <= b.count, "DeviceBatch::load_rows: rows [" + std::to_string(first) + ", " +
                                                std::to_string(first + rows) + ") of a batch of " +
                                                std::to_string(b.count));
  const std::int64_t width = core::shape_size(sample_shape);
  const std::size_t values = rows * static_cast<std::size_t>(width);
  HPCTRAIN_REQUIRE(b.resident != nullptr || b.samples.size() == b.count * static_cast<std::size_t>(width),
                   "DeviceBatch::load_rows: the batch holds " + std::to_string(b.samples.size()) + " values for " +
                       std::to_string(b.count) + " samples of " + std::to_string(width));
  core::Shape shape{static_cast<std::int64_t>(rows)};
  shape.insert(shape.end(), sample_shape.begin(), sample_shape.end());
  core::ensure_shape(x, "hpctrain::batch::x", shape);
  if (labels.extent(0) != rows) labels = core::Labels("hpctrain::batch::labels", rows);
  if constexpr (core::memory_is_host()) {
    if (b.resident != nullptr) {  // gathered from the data set in memory: one copy, on the rank's threads
      core::gather_rows_from_host(x.data, b.resident, width, b.sample_indices.data() + first,
                                  static_cast<std::int64_t>(rows));
    } else {
      Kokkos::deep_copy(x.data, HostView<float>(b.samples.data() + first * static_cast<std::size_t>(width), values));
    }
    Kokkos::deep_copy(labels, HostView<std::int32_t>(b.labels.data() + first, rows));
  } else {
    // Pinned staging, then host to device on this batch's own stream.
    if (!copy_) copy_ = std::make_shared<core::CopyStream>();
    copy_->wait();  // the staging buffers are free again
    core::reserve_staging(staged_x_, values);
    core::reserve_staging(staged_labels_, rows);
    float* const staged = staged_x_.data();
    if (b.resident != nullptr) {  // gathered row by row from the data set in memory
      const auto bytes = static_cast<std::size_t>(width) * sizeof(float);
      for (std::size_t k = 0; k < rows; ++k) {
        std::memcpy(staged + k * static_cast<std::size_t>(width), b.resident + b.sample_indices[first + k] * width,
                    bytes);
      }
    } else {
      std::memcpy(staged, b.samples.data() + first * static_cast<std::size_t>(width), values * sizeof(float));
    }
    std::memcpy(staged_labels_.data(), b.labels.data() + first, rows * sizeof(std::int32_t));
    Kokkos::deep_copy(copy_->space(), x.data, Kokkos::subview(staged_x_, std::make_pair(std::size_t{0}, values)));
    Kokkos::deep_copy(copy_->space(), labels, Kokkos::subview(staged_labels_, std::make_pair(std::size_t{0}, rows)));
  }
}

void DeviceBatch::wait() {
  if (copy_) copy_->wait();
}

DeviceBatch DeviceBatch::rows(std::int64_t first, std::int64_t count) const {
  HPCTRAIN_REQUIRE(first >= 0 && count >= 0 && x.rank() >= 1 && first + count <= x.dim(0),
                   "DeviceBatch::rows: rows [" + std::to_string(first) + ", " + std::to_string(first + count) +
                       ") of a batch of " + std::to_string(x.rank() >= 1 ? x.dim(0) : 0));
  const std::int64_t width = x.dim(0) == 0 ? 0 : x.size() / x.dim(0);
  core::Shape shape = x.shape;
  shape[0] = count;
  DeviceBatch out;
  out.x = core::Tensor<float>(core::slice(x.data, first * width, count * width), shape);
  out.labels = core::Labels(Kokkos::subview(labels, std::make_pair(first, first + count)));
  return out;
}

}  // namespace hpctrain::train
