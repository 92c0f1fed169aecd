#include "hpctrain/io/in_memory_dataset.hpp"

#include "hpctrain/base/error.hpp"

#include <fmt/format.h>

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <numeric>

namespace hpctrain::io {

namespace {

/// `count` floats, not initialised, 2 MiB aligned and advised to use transparent huge pages
/// (where the kernel allows it: /sys/kernel/mm/transparent_hugepage/enabled `madvise` or
/// `always`), so first touch costs one fault per 2 MiB rather than per 4 KiB.
float* allocate_samples(std::size_t count, const std::string& path) {
  constexpr std::size_t kHuge = std::size_t{2} << 20;
  const std::size_t bytes = std::max<std::size_t>((count * sizeof(float) + kHuge - 1) / kHuge * kHuge, kHuge);
  void* p = nullptr;
  HPCTRAIN_REQUIRE(posix_memalign(&p, kHuge, bytes) == 0,
                   fmt::format("data set '{}': cannot allocate {} bytes to hold it in memory", path, bytes));
  (void)madvise(p, bytes, MADV_HUGEPAGE);  // advice only: without huge pages the block still works
  return static_cast<float*>(p);
}

}  // namespace

std::size_t InMemoryDataset::bytes_needed(const DatasetInfo& info) noexcept {
  const auto count = static_cast<std::size_t>(std::max<std::int64_t>(info.count, 0));
  const auto size = static_cast<std::size_t>(std::max<std::int64_t>(info.sample_size, 0));
  return count * (size * sizeof(float) + sizeof(std::int32_t));
}

InMemoryDataset::InMemoryDataset(const DatasetReader& reader) : info_(reader.info()) {
  // Blocks of 4096 consecutive samples: one hyperslab read each, and a bounded scratch buffer.
  constexpr std::int64_t kBlock = 4096;
  const auto size = static_cast<std::size_t>(info_.sample_size);
  samples_.reset(allocate_samples(static_cast<std::size_t>(info_.count) * size, info_.path));
  labels_.resize(static_cast<std::size_t>(info_.count));
  std::vector<std::int64_t> indices;
  std::vector<float> block_samples;
  std::vector<std::int32_t> block_labels;
  for (std::int64_t first = 0; first < info_.count; first += kBlock) {
    indices.resize(static_cast<std::size_t>(std::min(kBlock, info_.count - first)));
    std::iota(indices.begin(), indices.end(), first);
    reader.read(indices, block_samples, block_labels);
    std::copy(block_samples.begin(), block_samples.end(), samples_.get() + static_cast<std::size_t>(first) * size);
    std::copy(block_labels.begin(), block_labels.end(), labels_.begin() + first);
  }
}

void InMemoryDataset::read_labels(const std::vector<std::int64_t>& indices, std::vector<std::int32_t>& labels) const {
  labels.resize(indices.size());
  for (std::size_t k = 0; k < indices.size(); ++k) {
    const std::int64_t i = indices[k];
    HPCTRAIN_REQUIRE(i >= 0 && i < info_.count,
                     fmt::format("data set '{}' (in memory): sample index {} is not in [0, {})",
                                 info_.path, i, info_.count));
    labels[k] = labels_[static_cast<std::size_t>(i)];
  }
}

void InMemoryDataset::read(const std::vector<std::int64_t>& indices, std::vector<float>& samples,
                           std::vector<std::int32_t>& labels) const {
  read_labels(indices, labels);  // checks every index
  const auto size = static_cast<std::size_t>(info_.sample_size);
  samples.resize(indices.size() * size);
  for (std::size_t k = 0; k < indices.size(); ++k) {
    std::memcpy(samples.data() + k * size, samples_.get() + static_cast<std::size_t>(indices[k]) * size,
                size * sizeof(float));
  }
}

}  // namespace hpctrain::io
