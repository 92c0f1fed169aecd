#include "hpctrain/train/device_batch.hpp"

#include <Kokkos_Core.hpp>

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
  HPCTRAIN_REQUIRE(first + rows <= b.count, "DeviceBatch::load_rows: rows [" + std::to_string(first) + ", " +
                                                std::to_string(first + rows) + ") of a batch of " +
                                                std::to_string(b.count));
  const std::int64_t width = core::shape_size(sample_shape);
  core::Shape shape{static_cast<std::int64_t>(rows)};
  shape.insert(shape.end(), sample_shape.begin(), sample_shape.end());
  core::ensure_shape(x, "hpctrain::batch::x", shape);
  if (b.resident != nullptr) {  // gathered from the data set in memory: one copy, on the rank's threads
    core::gather_rows_from_host(x.data, b.resident, width, b.sample_indices.data() + first,
                                static_cast<std::int64_t>(rows));
  } else {
    HPCTRAIN_REQUIRE(b.samples.size() == b.count * static_cast<std::size_t>(width),
                     "DeviceBatch::load_rows: the batch holds " + std::to_string(b.samples.size()) + " values for " +
                         std::to_string(b.count) + " samples of " + std::to_string(width));
    Kokkos::deep_copy(x.data, HostView<float>(b.samples.data() + first * static_cast<std::size_t>(width),
                                              rows * static_cast<std::size_t>(width)));
  }
  if (labels.extent(0) != rows) labels = core::Labels("hpctrain::batch::labels", rows);
  Kokkos::deep_copy(labels, HostView<std::int32_t>(b.labels.data() + first, rows));
}

}  // namespace hpctrain::train
