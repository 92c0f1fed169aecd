#include "hpctrain/train/device_batch.hpp"

#include <Kokkos_Core.hpp>

namespace hpctrain::train {

namespace {
template <class T>
using HostView = Kokkos::View<const T*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
}  // namespace

void DeviceBatch::load(const io::Batch& b, const core::Shape& sample_shape) {
  core::Shape shape{static_cast<std::int64_t>(b.count)};
  shape.insert(shape.end(), sample_shape.begin(), sample_shape.end());
  core::ensure_shape(x, "hpctrain::batch::x", shape);
  core::from_host(x.data, b.samples);
  if (labels.extent(0) != b.count) labels = core::Labels("hpctrain::batch::labels", b.count);
  Kokkos::deep_copy(labels, HostView<std::int32_t>(b.labels.data(), b.count));
}

void DeviceBatch::load_rows(const io::Batch& b, std::size_t first, std::size_t rows, const core::Shape& sample_shape) {
  std::int64_t per_sample = 1;
  for (auto d : sample_shape) per_sample *= d;
  core::Shape shape{static_cast<std::int64_t>(rows)};
  shape.insert(shape.end(), sample_shape.begin(), sample_shape.end());
  core::ensure_shape(x, "hpctrain::batch::x", shape);
  const auto width = static_cast<std::size_t>(per_sample);
  Kokkos::deep_copy(x.data, HostView<float>(b.samples.data() + first * width, rows * width));
  if (labels.extent(0) != rows) labels = core::Labels("hpctrain::batch::labels", rows);
  Kokkos::deep_copy(labels, HostView<std::int32_t>(b.labels.data() + first, rows));
}

}  // namespace hpctrain::train
