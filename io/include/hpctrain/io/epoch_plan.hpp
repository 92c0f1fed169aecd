#pragma once
/// @file
/// Which samples each rank reads in each step: one global permutation per epoch, global batches
/// cut from it, each global batch split over the ranks.
///
/// Permutation of epoch e (identical on every platform and compiler; docs/data.md gives it as
/// Python):
///   mix(z)     = splitmix64's finaliser (Steele, Lea, Flood 2014):
///                z = (z ^ z>>30) * 0xBF58476D1CE4E5B9; z = (z ^ z>>27) * 0x94D049BB133111EB;
///                z ^ z>>31                                               (all mod 2^64)
///   state      = mix(seed) ^ mix(e + 0x9E3779B97F4A7C15)
///   next()     = state += 0x9E3779B97F4A7C15; return mix(state)       (splitmix64)
///   bounded(n) = r = next() until r >= (2^64 - n) mod n; return r mod n (unbiased)
///   perm       = [0, 1, ..., N-1]; for i = N-1 down to 1: swap(perm[i], perm[bounded(i+1)])
/// (std::shuffle and std::uniform_int_distribution are not used: their output differs between
/// standard libraries.) With shuffle off the permutation is the identity.
///
/// Block shuffling (shuffle_block S > 1): the same draws permute the ceil(N/S) blocks of S
/// consecutive samples ([k*S, min((k+1)*S, N)), the last one possibly shorter) instead of the
/// samples, and the permutation is the blocks in that order, each block's samples in file order.
/// A batch then holds about B/S runs of S consecutive samples: what a data set streamed from a
/// disk needs (docs/data.md); it assumes the file's own order is already random. S = 1 is the
/// sample permutation above, draw for draw.
///
/// Global batch b holds positions [b*B, min((b+1)*B, N)) of the permutation; its size is
/// B_b = B except for a last partial batch, which exists only when drop_last is false. Rank r of
/// P takes positions [floor(r*B_b/P), floor((r+1)*B_b/P)) of the batch: when P does not divide
/// B_b the rank shares differ by at most one sample (and a rank can get none when B_b < P).
/// Concatenating the ranks' shares in rank order gives the global batch exactly, so the samples
/// of every step, and of the epoch, do not depend on P.
///
/// With a granule G > 1 (deterministic training's micro-shards) the batch is cut into
/// ceil(B_b/G) granules of G positions (the last may be shorter) and rank r takes the whole
/// granules [floor(r*n/P), floor((r+1)*n/P)), n = ceil(B_b/G). G = 1 is the split above.

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace hpctrain::io {

/// splitmix64 stream seeded from (seed, epoch) with an unbiased bounded draw: the generator
/// behind the epoch permutation (exposed for tests and for other reproducible choices).
class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t state) noexcept : state_(state) {}
  /// The stream of epoch `epoch` under `seed` (see the file comment).
  static SplitMix64 for_epoch(std::uint64_t seed, std::uint64_t epoch) noexcept;
  static std::uint64_t mix(std::uint64_t z) noexcept;
  std::uint64_t next() noexcept;
  /// Uniform in [0, n), n >= 1, without modulo bias.
  std::uint64_t bounded(std::uint64_t n) noexcept;

 private:
  std::uint64_t state_;
};

/// The permutation of [0, count) for `epoch` (identity when shuffle is false).
std::vector<std::int64_t> epoch_permutation(std::int64_t count, std::uint64_t seed,
                                            std::int64_t epoch, bool shuffle = true,
                                            std::int64_t shuffle_block = 1);

/// A rank's share of one global batch: positions [offset, offset + count) of the batch.
struct RankSlice {
  std::int64_t offset = 0;
  std::int64_t count = 0;
};

/// Rank `rank` of `world`'s positions in a global batch of `batch_size` cut into granules of
/// `granule` positions (the file comment): what EpochPlan::rank_slice returns.
RankSlice granule_slice(std::int64_t batch_size, std::int64_t granule, int rank, int world);

/// The sharding of a data set of `count` samples over `world` ranks (see the file comment).
/// Copies share the cached permutation; all methods are thread-safe.
class EpochPlan {
 public:
  /// `global_batch` is the batch over all ranks (the unit the user sets), >= 1.
  EpochPlan(std::int64_t count, std::int64_t global_batch, int rank, int world,
            std::uint64_t seed, bool drop_last, bool shuffle = true, std::int64_t granule = 1,
            std::int64_t shuffle_block = 1);

  std::int64_t count() const noexcept { return count_; }
  std::int64_t global_batch() const noexcept { return global_batch_; }
  int rank() const noexcept { return rank_; }
  int world() const noexcept { return world_; }
  std::uint64_t seed() const noexcept { return seed_; }
  bool drop_last() const noexcept { return drop_last_; }
  bool shuffle() const noexcept { return shuffle_; }
  /// Positions per granule of a rank's share (see the file comment); 1 by default.
  std::int64_t granule() const noexcept { return granule_; }
  /// Samples per shuffled block (see the file comment); 1 by default.
  std::int64_t shuffle_block() const noexcept { return shuffle_block_; }

  /// floor(N/B) with drop_last, ceil(N/B) without.
  std::int64_t batches_per_epoch() const noexcept;
  /// Samples used per epoch over all ranks: N, or floor(N/B)*B with drop_last.
  std::int64_t samples_per_epoch() const noexcept;
  /// B_b: B, or N mod B for a kept last partial batch. Divide summed per-sample gradients by
  /// this (not by world * per-rank count) so the result does not depend on P.
  std::int64_t global_batch_size(std::int64_t batch) const;
  /// This rank's positions within global batch `batch`.
  RankSlice rank_slice(std::int64_t batch) const { return rank_slice(batch, rank_); }
  RankSlice rank_slice(std::int64_t batch, int rank) const;

  /// The permutation of `epoch` (cached: the last epoch asked for is kept).
  std::shared_ptr<const std::vector<std::int64_t>> permutation(std::int64_t epoch) const;
  /// The global sample indices of global batch `batch` in `epoch`, in order.
  std::vector<std::int64_t> global_indices(std::int64_t epoch, std::int64_t batch) const;
  /// This rank's sample indices of global batch `batch` in `epoch`, in order.
  std::vector<std::int64_t> rank_indices(std::int64_t epoch, std::int64_t batch) const {
    return rank_indices(epoch, batch, rank_);
  }
  std::vector<std::int64_t> rank_indices(std::int64_t epoch, std::int64_t batch, int rank) const;

  /// Where position `position` of global batch `batch` in `epoch` lies in the run's sequence of
  /// sample draws: epoch * N + batch * B + position. It names a draw the same way at any P, so
  /// per-sample random streams (dropout) are keyed by it; it is not an index into the data set.
  std::int64_t sample_position(std::int64_t epoch, std::int64_t batch, std::int64_t position) const noexcept {
    return epoch * count_ + batch * global_batch_ + position;
  }
  /// sample_position of this rank's first sample of global batch `batch` in `epoch`.
  std::int64_t rank_sample_position(std::int64_t epoch, std::int64_t batch) const {
    return sample_position(epoch, batch, rank_slice(batch).offset);
  }

 private:
  void check_batch(std::int64_t batch) const;

  std::int64_t count_;
  std::int64_t global_batch_;
  int rank_;
  int world_;
  std::uint64_t seed_;
  bool drop_last_;
  bool shuffle_;
  std::int64_t granule_;
  std::int64_t shuffle_block_;

  struct Cache {
    std::mutex mutex;
    std::int64_t epoch = -1;
    std::shared_ptr<const std::vector<std::int64_t>> permutation;
  };
  std::shared_ptr<Cache> cache_ = std::make_shared<Cache>();
};

}  // namespace hpctrain::io
