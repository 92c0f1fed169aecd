// Prefetcher: same batches as direct reads, in order; the queue bound holds; errors reach the
// consumer after the batches read before them; destruction mid-epoch does not hang.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "hpctrain/io/prefetcher.hpp"
#include "io_test_support.hpp"

namespace io = hpctrain::io;
using io::test::RawDataset;
using io::test::TempDir;

namespace {

std::string make_file(const TempDir& dir, std::int64_t count, std::int64_t bad_label_index = -1) {
  RawDataset d;
  d.count = count;
  d.sample_dims = {1, 3, 3};
  d.bad_label_index = bad_label_index;
  d.bad_label_value = 99;
  const std::string path = dir.file("p.h5");
  io::test::write_dataset_file(path, d);
  return path;
}

}  // namespace

TEST(Prefetcher, YieldsTheDirectlyReadBatchesInOrder) {
  TempDir dir;
  io::DatasetReader reader(make_file(dir, 103));
  for (int rank = 0; rank < 3; ++rank) {
    io::EpochPlan plan(103, 10, rank, 3, 11, /*drop_last=*/false);
    for (const std::int64_t start : {0, 4, 11}) {
      // depth 3 (a thread) and 0 (synchronous, as the trainer reads an in-memory source).
      const std::size_t depth = start == 4 ? 0 : 3;
      io::Prefetcher pf(reader, plan, /*epoch=*/2, start, depth);
      for (std::int64_t b = start; b < plan.batches_per_epoch(); ++b) {
        std::optional<io::Batch> got = pf.next();
        ASSERT_TRUE(got) << "batch " << b;
        io::Batch want = io::read_batch(reader, plan, 2, b);
        EXPECT_EQ(got->epoch, 2);
        EXPECT_EQ(got->global_batch_index, b);
        EXPECT_EQ(got->global_batch_size, b == 10 ? 3 : 10);
        EXPECT_EQ(got->count, got->sample_indices.size());
        EXPECT_EQ(got->sample_indices, plan.rank_indices(2, b));
        EXPECT_EQ(got->samples, want.samples);
        EXPECT_EQ(got->labels, want.labels);
        ASSERT_EQ(got->samples.size(), got->count * 9);
        for (std::size_t k = 0; k < got->count; ++k) {
          EXPECT_NEAR(got->samples[k * 9 + 4],
                      io::test::synthetic_pixel(got->sample_indices[k], 4) / 255.0f, 1e-6f);
        }
      }
      EXPECT_FALSE(pf.next());
      EXPECT_FALSE(pf.next());  // stays finished
    }
  }
}

TEST(Prefetcher, QueueNeverHoldsMoreThanDepth) {
  TempDir dir;
  io::DatasetReader reader(make_file(dir, 200));
  io::EpochPlan plan(200, 8, 0, 1, 3, true);  // 25 batches
  for (std::size_t depth : {1u, 2u, 4u}) {
    io::Prefetcher pf(reader, plan, 0, 0, depth);
    // A slow consumer: the reader runs ahead until the queue is full.
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_EQ(pf.max_queued(), depth) << "the thread should have filled the queue by now";
    std::int64_t n = 0;
    while (auto b = pf.next()) {
      ++n;
      if (n % 5 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_EQ(n, 25);
    EXPECT_EQ(pf.max_queued(), depth);  // reached, never exceeded
  }
}

TEST(Prefetcher, ErrorArrivesAfterEarlierBatches) {
  TempDir dir;
  io::DatasetReaderOptions opts;
  opts.validate_labels = false;  // let the bad label through open, to fail in the thread
  io::DatasetReader reader(make_file(dir, 40, /*bad_label_index=*/35), opts);
  io::EpochPlan plan(40, 10, 0, 1, 0, false, /*shuffle=*/false);  // batch 3 holds index 35
  io::Prefetcher pf(reader, plan, 0, 0, 2);
  for (int b = 0; b < 3; ++b) ASSERT_TRUE(pf.next()) << b;
  try {
    pf.next();
    FAIL() << "no exception";
  } catch (const hpctrain::Error& e) {
    EXPECT_NE(std::string(e.what()).find("/labels: label 99 at index 35"), std::string::npos)
        << e.what();
  }
}

TEST(Prefetcher, DestroyedMidEpochWithoutHanging) {
  TempDir dir;
  io::DatasetReader reader(make_file(dir, 200));
  io::EpochPlan plan(200, 4, 0, 1, 3, true);
  {
    io::Prefetcher pf(reader, plan, 0, 0, 2);
    ASSERT_TRUE(pf.next());
  }  // the thread is blocked on a full queue here; the destructor must wake and join it
  SUCCEED();
}

TEST(Prefetcher, RejectsMismatchedPlanAndBadArguments) {
  TempDir dir;
  io::DatasetReader reader(make_file(dir, 50));
  EXPECT_THROW(io::Prefetcher(reader, io::EpochPlan(51, 5, 0, 1, 0, false), 0), hpctrain::Error);
  io::EpochPlan plan(50, 5, 0, 1, 0, false);
  EXPECT_THROW(io::Prefetcher(reader, plan, 0, 11, 2), hpctrain::Error);
  io::Prefetcher done(reader, plan, 0, 10, 2);  // start at the end: nothing to read
  EXPECT_FALSE(done.next());
}
