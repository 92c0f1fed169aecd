// EpochPlan: the permutation is the documented one, reproducible and epoch-dependent; the
// ranks' shares of each global batch concatenate to the P = 1 batch; every sample is seen once
// per epoch (drop_last off) whatever P is.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "hpctrain/base/error.hpp"
#include "hpctrain/io/epoch_plan.hpp"

namespace io = hpctrain::io;

TEST(SplitMix64, CanonicalOutputs) {
  // The first outputs of Vigna's reference splitmix64.c seeded with 1234567.
  io::SplitMix64 g(1234567);
  EXPECT_EQ(g.next(), 6457827717110365317ULL);
  EXPECT_EQ(g.next(), 3203168211198807973ULL);
  EXPECT_EQ(g.next(), 9817491932198370423ULL);
  EXPECT_EQ(g.next(), 4593380528125082431ULL);
  EXPECT_EQ(g.next(), 16408922859458223821ULL);
}

TEST(SplitMix64, BoundedStaysInRangeAndCoversIt) {
  io::SplitMix64 g(7);
  std::vector<int> hits(7, 0);
  for (int i = 0; i < 7000; ++i) {
    std::uint64_t r = g.bounded(7);
    ASSERT_LT(r, 7u);
    ++hits[r];
  }
  for (int h : hits) EXPECT_GT(h, 850);  // expected 1000 each; 850 is > 4.5 sigma below
  EXPECT_EQ(g.bounded(1), 0u);
  // A bound just above 2^63 rejects almost half the draws; the result must still be in range.
  const std::uint64_t big = (std::uint64_t{1} << 63) + 12345;
  for (int i = 0; i < 100; ++i) EXPECT_LT(g.bounded(big), big);
}

TEST(EpochPermutation, KnownAnswers) {
  // Computed by the Python transcription of the algorithm in epoch_plan.hpp / docs/data.md
  // (arbitrary-precision integers, no C++ involved).
  EXPECT_EQ(io::epoch_permutation(10, 42, 0),
            (std::vector<std::int64_t>{5, 9, 0, 3, 1, 2, 6, 4, 7, 8}));
  EXPECT_EQ(io::epoch_permutation(10, 42, 1),
            (std::vector<std::int64_t>{9, 7, 6, 0, 4, 8, 3, 2, 5, 1}));
  EXPECT_EQ(io::epoch_permutation(12, 0, 3),
            (std::vector<std::int64_t>{7, 3, 9, 2, 1, 10, 8, 4, 5, 0, 6, 11}));
  EXPECT_EQ(io::epoch_permutation(5, 42, 0, /*shuffle=*/false),
            (std::vector<std::int64_t>{0, 1, 2, 3, 4}));
  EXPECT_TRUE(io::epoch_permutation(0, 1, 0).empty());
  EXPECT_EQ(io::epoch_permutation(1, 1, 0), std::vector<std::int64_t>{0});
}

TEST(EpochPermutation, IsAPermutationReproducibleAndDiffersByEpochAndSeed) {
  const std::int64_t n = 1000;
  auto p0 = io::epoch_permutation(n, 123, 0);
  auto sorted = p0;
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::int64_t> iota(n);
  std::iota(iota.begin(), iota.end(), 0);
  EXPECT_EQ(sorted, iota);
  EXPECT_EQ(io::epoch_permutation(n, 123, 0), p0);
  EXPECT_NE(io::epoch_permutation(n, 123, 1), p0);
  EXPECT_NE(io::epoch_permutation(n, 124, 0), p0);
  EXPECT_NE(p0, iota);
  // Epochs are not shifted copies of one another: positions that agree are few (~1 expected).
  auto p1 = io::epoch_permutation(n, 123, 1);
  int same = 0;
  for (std::int64_t i = 0; i < n; ++i) same += p0[i] == p1[i];
  EXPECT_LT(same, 10);
}

namespace {

struct Case {
  std::int64_t n;
  std::int64_t batch;
  bool drop_last;
};

}  // namespace

TEST(EpochPlan, RankSharesConcatenateToTheSingleRankBatch) {
  for (Case c : {Case{1000, 64, false}, Case{1000, 64, true}, Case{103, 10, false},
                 Case{103, 10, true}, Case{7, 10, false}, Case{3, 1, false}}) {
    const io::EpochPlan one(c.n, c.batch, 0, 1, 99, c.drop_last);
    const std::int64_t nb = one.batches_per_epoch();
    EXPECT_EQ(nb, c.drop_last ? c.n / c.batch : (c.n + c.batch - 1) / c.batch);
    for (int world : {1, 2, 3, 4}) {
      SCOPED_TRACE(::testing::Message() << "N=" << c.n << " B=" << c.batch << " P=" << world
                                        << " drop_last=" << c.drop_last);
      std::vector<io::EpochPlan> plans;
      for (int r = 0; r < world; ++r) plans.emplace_back(c.n, c.batch, r, world, 99, c.drop_last);
      for (std::int64_t epoch : {0, 1, 5}) {
        std::vector<int> seen(static_cast<std::size_t>(c.n), 0);
        for (std::int64_t b = 0; b < nb; ++b) {
          std::vector<std::int64_t> joined;
          std::int64_t min_share = c.n, max_share = 0;
          for (int r = 0; r < world; ++r) {
            EXPECT_EQ(plans[r].batches_per_epoch(), nb);
            auto mine = plans[r].rank_indices(epoch, b);
            EXPECT_EQ(static_cast<std::int64_t>(mine.size()), plans[r].rank_slice(b).count);
            min_share = std::min<std::int64_t>(min_share, mine.size());
            max_share = std::max<std::int64_t>(max_share, mine.size());
            joined.insert(joined.end(), mine.begin(), mine.end());
          }
          const auto reference = one.global_indices(epoch, b);
          ASSERT_EQ(joined, reference) << "batch " << b;  // same samples, same order
          EXPECT_EQ(static_cast<std::int64_t>(reference.size()), one.global_batch_size(b));
          EXPECT_LE(max_share - min_share, 1) << "batch " << b;
          for (auto i : joined) ++seen[static_cast<std::size_t>(i)];
        }
        const auto used = std::count(seen.begin(), seen.end(), 1);
        EXPECT_EQ(std::count_if(seen.begin(), seen.end(), [](int s) { return s > 1; }), 0);
        EXPECT_EQ(used, one.samples_per_epoch());
        if (!c.drop_last) {
          EXPECT_EQ(used, c.n);  // every sample exactly once
        }
      }
    }
  }
}

TEST(EpochPlan, GranulesAreWholeAndTileTheBatch) {
  // B = 40, granule 8 (5 granules) over P = 3: granules [0,1), [1,3), [3,5) -> positions
  // [0,8), [8,24), [24,40). A last batch of 21 (granules of 8, 8, 5) over P = 2: [0,8), [8,21).
  const std::vector<io::RankSlice> expected = {{0, 8}, {8, 16}, {24, 16}};
  for (int r = 0; r < 3; ++r) {
    io::EpochPlan p(101, 40, r, 3, 1, false, true, 8);
    EXPECT_EQ(p.rank_slice(0).offset, expected[r].offset) << r;
    EXPECT_EQ(p.rank_slice(0).count, expected[r].count) << r;
  }
  io::EpochPlan last(101, 40, 0, 2, 1, false, true, 8);
  EXPECT_EQ(last.global_batch_size(2), 21);
  EXPECT_EQ(last.rank_slice(2, 0).offset, 0);
  EXPECT_EQ(last.rank_slice(2, 0).count, 8);
  EXPECT_EQ(last.rank_slice(2, 1).offset, 8);
  EXPECT_EQ(last.rank_slice(2, 1).count, 13);
  // Every P from 1 to 7: shares start on granule boundaries and concatenate to the batch.
  for (int world = 1; world <= 7; ++world) {
    std::int64_t next = 0;
    for (int r = 0; r < world; ++r) {
      io::EpochPlan p(101, 40, r, world, 1, false, true, 8);
      const auto s = p.rank_slice(0);
      EXPECT_EQ(s.offset, next);
      EXPECT_EQ(s.offset % 8, 0);
      next = s.offset + s.count;
    }
    EXPECT_EQ(next, 40);
  }
  EXPECT_THROW(io::EpochPlan(10, 4, 0, 1, 0, false, true, 0), hpctrain::Error);
}

// Sample positions name each draw of the run once, whatever P: the ranks' first positions
// tile each global batch, and batches and epochs follow each other without gaps or overlaps.
TEST(EpochPlan, SamplePositionsTileTheRunAtAnyRankCount) {
  const std::int64_t n = 103, batch = 10;  // 10 full batches and a partial one of 3
  for (int world : {1, 2, 3, 7, 16}) {
    std::int64_t expected = 0;
    for (std::int64_t epoch = 0; epoch < 2; ++epoch) {
      for (std::int64_t b = 0; b < 11; ++b) {
        for (int r = 0; r < world; ++r) {
          const io::EpochPlan plan(n, batch, r, world, 5, /*drop_last=*/false);
          EXPECT_EQ(plan.rank_sample_position(epoch, b), expected) << "P " << world << " epoch " << epoch << " batch " << b << " rank " << r;
          expected += plan.rank_slice(b).count;
        }
      }
      EXPECT_EQ(expected, (epoch + 1) * n);
    }
  }
}

TEST(EpochPlan, UnevenSplitIsFloorBased) {
  // B = 10 over P = 4: floor(r*10/4) gives offsets 0, 2, 5, 7 and counts 2, 3, 2, 3.
  const std::vector<io::RankSlice> expected = {{0, 2}, {2, 3}, {5, 2}, {7, 3}};
  for (int r = 0; r < 4; ++r) {
    io::EpochPlan p(100, 10, r, 4, 1, false);
    EXPECT_EQ(p.rank_slice(0).offset, expected[r].offset) << r;
    EXPECT_EQ(p.rank_slice(0).count, expected[r].count) << r;
  }
  // A last batch of 3 samples over 4 ranks: rank 0 gets none.
  io::EpochPlan p(103, 10, 0, 4, 1, false);
  EXPECT_EQ(p.global_batch_size(10), 3);
  EXPECT_EQ(p.rank_slice(10).count, 0);
  EXPECT_TRUE(p.rank_indices(0, 10).empty());
  EXPECT_EQ(p.rank_slice(10, 3).count, 1);
}

TEST(EpochPlan, DropLastDropsOnlyThePartialBatch) {
  io::EpochPlan keep(103, 10, 0, 1, 5, false);
  io::EpochPlan drop(103, 10, 0, 1, 5, true);
  EXPECT_EQ(keep.batches_per_epoch(), 11);
  EXPECT_EQ(drop.batches_per_epoch(), 10);
  EXPECT_EQ(keep.global_batch_size(10), 3);
  EXPECT_EQ(drop.samples_per_epoch(), 100);
  for (std::int64_t b = 0; b < 10; ++b) EXPECT_EQ(keep.global_indices(2, b), drop.global_indices(2, b));
  EXPECT_THROW(drop.global_indices(2, 10), hpctrain::Error);
  io::EpochPlan exact(100, 10, 0, 1, 5, true);
  EXPECT_EQ(exact.batches_per_epoch(), 10);
}

TEST(EpochPlan, CopiesShareTheCacheAndAgree) {
  io::EpochPlan a(500, 32, 1, 3, 77, false);
  io::EpochPlan b = a;
  EXPECT_EQ(a.rank_indices(3, 4), b.rank_indices(3, 4));
  EXPECT_EQ(a.permutation(3).get(), b.permutation(3).get());  // computed once
  EXPECT_EQ(*a.permutation(3), io::epoch_permutation(500, 77, 3));
}

TEST(EpochPlan, RejectsBadArguments) {
  EXPECT_THROW(io::EpochPlan(10, 0, 0, 1, 0, false), hpctrain::Error);
  EXPECT_THROW(io::EpochPlan(10, 4, 2, 2, 0, false), hpctrain::Error);
  EXPECT_THROW(io::EpochPlan(-1, 4, 0, 1, 0, false), hpctrain::Error);
  io::EpochPlan p(10, 4, 0, 1, 0, false);
  EXPECT_THROW(p.rank_indices(0, 3), hpctrain::Error);
  EXPECT_THROW(p.rank_indices(0, -1), hpctrain::Error);
}

TEST(EpochPermutation, BlocksAreTheSamePermutationOfBlocksKeptWhole) {
  // Block order = the sample permutation of ceil(N/S) items under the same seed and epoch (whose
  // known answers are checked above); each block's samples stay in file order.
  for (const auto& [n, s] : std::vector<std::pair<std::int64_t, std::int64_t>>{{10, 3}, {12, 4}, {100, 7}, {5, 9}}) {
    const std::int64_t blocks = (n + s - 1) / s;
    const auto order = io::epoch_permutation(blocks, 42, 2);
    std::vector<std::int64_t> expected;
    for (const std::int64_t b : order) {
      for (std::int64_t i = b * s; i < std::min(n, (b + 1) * s); ++i) expected.push_back(i);
    }
    EXPECT_EQ(io::epoch_permutation(n, 42, 2, true, s), expected) << "N = " << n << ", S = " << s;
  }
  // Python transcription of docs/data.md: the permutation of 4 under seed 42, epoch 0 is [3, 0, 1, 2].
  EXPECT_EQ(io::epoch_permutation(10, 42, 0, true, 3), (std::vector<std::int64_t>{9, 0, 1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(io::epoch_permutation(100, 7, 1, true, 1), io::epoch_permutation(100, 7, 1));
  EXPECT_EQ(io::epoch_permutation(6, 7, 1, false, 4), (std::vector<std::int64_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_THROW(io::epoch_permutation(6, 7, 1, true, 0), hpctrain::Error);
  // EpochPlan with blocks: the ranks' shares still concatenate to the whole batch.
  const io::EpochPlan one(1000, 96, 0, 1, 3, false, true, 1, 16);
  EXPECT_EQ(one.shuffle_block(), 16);
  for (int world : {2, 3, 5}) {
    for (std::int64_t b = 0; b < one.batches_per_epoch(); ++b) {
      std::vector<std::int64_t> joined;
      for (int r = 0; r < world; ++r) {
        const io::EpochPlan plan(1000, 96, r, world, 3, false, true, 1, 16);
        const auto mine = plan.rank_indices(1, b);
        joined.insert(joined.end(), mine.begin(), mine.end());
      }
      ASSERT_EQ(joined, one.global_indices(1, b)) << "P = " << world << ", batch " << b;
    }
  }
}
