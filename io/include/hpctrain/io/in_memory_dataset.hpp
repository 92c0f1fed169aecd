#pragma once
/// @file
/// A data set's normalised samples held in memory, so training batches are copies rather than
/// HDF5 reads.
///
/// Why: a training batch is a random subset of the data set, so DatasetReader makes one HDF5
/// read per sample (about 2 us each with HDF5 1.10.8, plus the kernel's pread) on the
/// prefetch thread, which on a node with one rank per core competes with the compute of the
/// other ranks (about 15 % of the CPU samples of an MLP run in a perf profile). A copy from
/// memory costs well under a tenth of that. The values are exactly DatasetReader's (they are
/// read through it), so training gives the same bits either way.
///
/// Memory: count x sample_size floats plus count labels per rank (Fashion-MNIST's training
/// split: 188 MB). The trainer uses it only when that is at most --data-in-memory-mib. The
/// samples live in one block asked to be backed by transparent huge pages (madvise) and not
/// zero-filled first: faulting in 188 MB page by page took 0.6-0.7 s of a run's start here.

#include "hpctrain/io/dataset.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

namespace hpctrain::io {

class InMemoryDataset final : public SampleSource {
 public:
  /// Bytes a copy of `info`'s samples and labels takes.
  static std::size_t bytes_needed(const DatasetInfo& info) noexcept;

  /// Reads every sample of `reader` (in blocks of consecutive indices: one HDF5 read per
  /// block). Throws what DatasetReader::read throws (a non-finite value, a bad label).
  explicit InMemoryDataset(const DatasetReader& reader);

  const DatasetInfo& info() const noexcept override { return info_; }
  void read(const std::vector<std::int64_t>& indices, std::vector<float>& samples,
            std::vector<std::int32_t>& labels) const override;
  void read_labels(const std::vector<std::int64_t>& indices, std::vector<std::int32_t>& labels) const override;
  std::optional<Resident> resident() const noexcept override { return Resident{samples_.get()}; }

 private:
  struct Free {
    void operator()(float* p) const noexcept { std::free(p); }
  };
  DatasetInfo info_;
  std::unique_ptr<float[], Free> samples_;  // count x sample_size
  std::vector<std::int32_t> labels_;
};

}  // namespace hpctrain::io
