#include "hpctrain/ml/sample_partition.hpp"

#include <algorithm>

namespace hpctrain::ml {

namespace {
std::int64_t first_block_of(std::int64_t blocks, std::int64_t rank, std::int64_t ranks) {
  return blocks * rank / ranks;
}
}  // namespace

std::int64_t SamplePartition::block_length(std::int64_t b) const noexcept {
  const std::int64_t begin = (first_block + b) * kSumBlockSamples;
  return std::min(total_samples, begin + kSumBlockSamples) - begin;
}

int SamplePartition::owner_of(std::int64_t total_samples, std::int64_t index, int ranks) noexcept {
  const std::int64_t blocks = (total_samples + kSumBlockSamples - 1) / kSumBlockSamples;
  const std::int64_t block = index / kSumBlockSamples;
  // The last rank r with first_block_of(r) <= block.
  int r = static_cast<int>(std::min<std::int64_t>(ranks - 1, (block * ranks) / std::max<std::int64_t>(blocks, 1)));
  while (r + 1 < ranks && first_block_of(blocks, r + 1, ranks) <= block) ++r;
  while (r > 0 && first_block_of(blocks, r, ranks) > block) --r;
  return r;
}

SamplePartition partition_samples(std::int64_t total_samples, int rank, int ranks) {
  SamplePartition p;
  p.total_samples = total_samples;
  p.total_blocks = (total_samples + kSumBlockSamples - 1) / kSumBlockSamples;
  p.first_block = first_block_of(p.total_blocks, rank, ranks);
  p.block_count = first_block_of(p.total_blocks, rank + 1, ranks) - p.first_block;
  p.first_sample = std::min(total_samples, p.first_block * kSumBlockSamples);
  const std::int64_t end = std::min(total_samples, (p.first_block + p.block_count) * kSumBlockSamples);
  p.sample_count = end - p.first_sample;
  return p;
}

}  // namespace hpctrain::ml
