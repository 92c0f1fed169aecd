#include "hpctrain/io/epoch_plan.hpp"

#include <algorithm>
#include <numeric>
#include <utility>

#include <fmt/format.h>

#include "hpctrain/base/error.hpp"

namespace hpctrain::io {

namespace {
// 2^64 / golden ratio: splitmix64's increment (odd, so the counter visits every state).
constexpr std::uint64_t kGoldenGamma = 0x9E3779B97F4A7C15ULL;
}  // namespace

std::uint64_t SplitMix64::mix(std::uint64_t z) noexcept {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

SplitMix64 SplitMix64::for_epoch(std::uint64_t seed, std::uint64_t epoch) noexcept {
  return SplitMix64(mix(seed) ^ mix(epoch + kGoldenGamma));
}

std::uint64_t SplitMix64::next() noexcept {
  state_ += kGoldenGamma;
  return mix(state_);
}

std::uint64_t SplitMix64::bounded(std::uint64_t n) noexcept {
  // Reject the lowest (2^64 mod n) values so that every residue is equally likely.
  const std::uint64_t threshold = (0 - n) % n;
  for (;;) {
    std::uint64_t r = next();
    if (r >= threshold) return r % n;
  }
}

std::vector<std::int64_t> epoch_permutation(std::int64_t count, std::uint64_t seed,
                                            std::int64_t epoch, bool shuffle, std::int64_t shuffle_block) {
  HPCTRAIN_REQUIRE(count >= 0, "epoch_permutation: negative sample count");
  HPCTRAIN_REQUIRE(epoch >= 0, "epoch_permutation: negative epoch");
  HPCTRAIN_REQUIRE(shuffle_block >= 1, fmt::format("epoch_permutation: shuffle block {} must be at least 1", shuffle_block));
  // Fisher-Yates over the blocks (the samples when shuffle_block is 1; none when shuffle is off).
  const std::int64_t blocks = shuffle ? (count + shuffle_block - 1) / shuffle_block : count;
  std::vector<std::int64_t> order(static_cast<std::size_t>(blocks));
  std::iota(order.begin(), order.end(), std::int64_t{0});
  if (!shuffle) return order;
  SplitMix64 rng = SplitMix64::for_epoch(seed, static_cast<std::uint64_t>(epoch));
  for (std::int64_t i = blocks - 1; i >= 1; --i) {
    auto j = static_cast<std::int64_t>(rng.bounded(static_cast<std::uint64_t>(i + 1)));
    std::swap(order[static_cast<std::size_t>(i)], order[static_cast<std::size_t>(j)]);
  }
  if (shuffle_block == 1) return order;
  std::vector<std::int64_t> perm;  // the blocks expanded to their samples, in file order
  perm.reserve(static_cast<std::size_t>(count));
  for (const std::int64_t b : order) {
    for (std::int64_t i = b * shuffle_block; i < std::min(count, (b + 1) * shuffle_block); ++i) perm.push_back(i);
  }
  return perm;
}

EpochPlan::EpochPlan(std::int64_t count, std::int64_t global_batch, int rank, int world,
                     std::uint64_t seed, bool drop_last, bool shuffle, std::int64_t granule,
                     std::int64_t shuffle_block)
    : count_(count),
      global_batch_(global_batch),
      rank_(rank),
      world_(world),
      seed_(seed),
      drop_last_(drop_last),
      shuffle_(shuffle),
      granule_(granule),
      shuffle_block_(shuffle_block) {
  HPCTRAIN_REQUIRE(shuffle_block >= 1, fmt::format("EpochPlan: shuffle block {} must be at least 1", shuffle_block));
  HPCTRAIN_REQUIRE(granule >= 1, fmt::format("EpochPlan: granule {} must be at least 1", granule));
  HPCTRAIN_REQUIRE(count >= 0, fmt::format("EpochPlan: sample count {} is negative", count));
  HPCTRAIN_REQUIRE(global_batch >= 1,
                   fmt::format("EpochPlan: global batch {} must be at least 1", global_batch));
  HPCTRAIN_REQUIRE(world >= 1 && rank >= 0 && rank < world,
                   fmt::format("EpochPlan: rank {} is not in [0, {})", rank, world));
}

std::int64_t EpochPlan::batches_per_epoch() const noexcept {
  return drop_last_ ? count_ / global_batch_ : (count_ + global_batch_ - 1) / global_batch_;
}

std::int64_t EpochPlan::samples_per_epoch() const noexcept {
  return drop_last_ ? (count_ / global_batch_) * global_batch_ : count_;
}

void EpochPlan::check_batch(std::int64_t batch) const {
  HPCTRAIN_REQUIRE(batch >= 0 && batch < batches_per_epoch(),
                   fmt::format("EpochPlan: batch {} is not in [0, {})", batch,
                               batches_per_epoch()));
}

std::int64_t EpochPlan::global_batch_size(std::int64_t batch) const {
  check_batch(batch);
  return std::min(global_batch_, count_ - batch * global_batch_);
}

RankSlice EpochPlan::rank_slice(std::int64_t batch, int rank) const {
  HPCTRAIN_REQUIRE(rank >= 0 && rank < world_,
                   fmt::format("EpochPlan: rank {} is not in [0, {})", rank, world_));
  return granule_slice(global_batch_size(batch), granule_, rank, world_);
}

RankSlice granule_slice(std::int64_t batch_size, std::int64_t granule, int rank, int world) {
  const std::int64_t b = batch_size;
  const std::int64_t granules = (b + granule - 1) / granule;
  const std::int64_t begin = std::min(b, granules * rank / world * granule);
  const std::int64_t end = std::min(b, granules * (rank + 1) / world * granule);
  return {begin, end - begin};
}

std::shared_ptr<const std::vector<std::int64_t>> EpochPlan::permutation(std::int64_t epoch) const {
  std::lock_guard<std::mutex> lock(cache_->mutex);
  if (cache_->epoch != epoch || !cache_->permutation) {
    cache_->permutation = std::make_shared<const std::vector<std::int64_t>>(
        epoch_permutation(count_, seed_, epoch, shuffle_, shuffle_block_));
    cache_->epoch = epoch;
  }
  return cache_->permutation;
}

std::vector<std::int64_t> EpochPlan::global_indices(std::int64_t epoch, std::int64_t batch) const {
  const std::int64_t size = global_batch_size(batch);
  auto perm = permutation(epoch);
  auto first = perm->begin() + batch * global_batch_;
  return std::vector<std::int64_t>(first, first + size);
}

std::vector<std::int64_t> EpochPlan::rank_indices(std::int64_t epoch, std::int64_t batch,
                                                  int rank) const {
  const RankSlice s = rank_slice(batch, rank);
  auto perm = permutation(epoch);
  auto first = perm->begin() + batch * global_batch_ + s.offset;
  return std::vector<std::int64_t>(first, first + s.count);
}

}  // namespace hpctrain::io
