#pragma once
/// @file
/// How the samples of a data set are split over ranks so that every sum over samples has the
/// same bits at any rank count.
///
/// The N samples are cut, by global index, into *sum blocks* of kSumBlockSamples consecutive
/// samples (the last one shorter). A sum block is never split: rank r of P owns the blocks
/// [B*r/P, B*(r+1)/P) (B = number of blocks), i.e. one contiguous slice of samples. Each block's
/// partial sum is computed on its owner in global-index order, so it is the same double for
/// every P; the block sums are then added exactly (exact_block_sum.hpp). With P > B some ranks
/// own no samples.

#include <cstdint>

namespace hpctrain::ml {

/// Samples per sum block. Why 1024: a block's f64 sum in sequence has a relative error below
/// 1024 * 2^-53 ~ 1e-13, while the block count B = N/1024 stays small enough that the exact
/// fixed-point sum over blocks keeps ~63 - 2 lg B bits (44 bits at N = 500 M samples).
inline constexpr std::int64_t kSumBlockSamples = 1024;

/// This rank's share of the samples (see the file comment).
struct SamplePartition {
  std::int64_t total_samples = 0;  ///< N
  std::int64_t total_blocks = 0;   ///< B = ceil(N / kSumBlockSamples)
  std::int64_t first_block = 0;    ///< first block this rank owns
  std::int64_t block_count = 0;    ///< blocks this rank owns (may be 0)
  std::int64_t first_sample = 0;   ///< global index of this rank's first sample
  std::int64_t sample_count = 0;   ///< samples this rank owns (contiguous)

  /// Global index of the first sample of local block `b` (0 <= b < block_count), relative to
  /// first_sample, and its length.
  std::int64_t block_begin(std::int64_t b) const noexcept {
    return (first_block + b) * kSumBlockSamples - first_sample;
  }
  std::int64_t block_length(std::int64_t b) const noexcept;
  /// The rank owning global sample `index` (0 <= index < N) among `ranks` ranks.
  static int owner_of(std::int64_t total_samples, std::int64_t index, int ranks) noexcept;
};

/// The share of rank `rank` of `ranks` of `total_samples` samples.
SamplePartition partition_samples(std::int64_t total_samples, int rank, int ranks);

}  // namespace hpctrain::ml
