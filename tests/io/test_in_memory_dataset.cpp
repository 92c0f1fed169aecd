// InMemoryDataset: the same bytes as DatasetReader for any index list (both normalisations,
// uint8 files with more than one read block), and a clear error for an index out of range.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "hpctrain/io/in_memory_dataset.hpp"
#include "hpctrain/io/prefetcher.hpp"
#include "io_test_support.hpp"

namespace io = hpctrain::io;
using io::test::RawDataset;
using io::test::TempDir;

TEST(InMemoryDataset, SameValuesAsTheReaderForAnyIndices) {
  TempDir dir;
  RawDataset d;
  d.count = 5000;  // more than one 4096-sample read block
  d.sample_dims = {1, 3, 4};
  const std::string path = dir.file("raw.h5");
  io::test::write_dataset_file(path, d);
  io::DatasetReaderOptions opts;
  opts.mean = 0.25f;
  opts.stddev = 0.5f;
  const io::DatasetReader reader(path, opts);
  const io::InMemoryDataset memory(reader);
  EXPECT_EQ(memory.info().count, 5000);
  EXPECT_EQ(memory.info().sample_shape, reader.info().sample_shape);
  EXPECT_EQ(io::InMemoryDataset::bytes_needed(reader.info()), 5000u * (12 * 4 + 4));

  std::mt19937_64 rng(7);
  std::uniform_int_distribution<std::int64_t> pick(0, 4999);
  std::vector<std::int64_t> idx = {4999, 0, 4095, 4096, 4096, 17};
  for (int i = 0; i < 500; ++i) idx.push_back(pick(rng));
  std::vector<float> want_s, got_s;
  std::vector<std::int32_t> want_l, got_l;
  reader.read(idx, want_s, want_l);
  memory.read(idx, got_s, got_l);
  ASSERT_EQ(got_s.size(), want_s.size());
  EXPECT_EQ(0, std::memcmp(got_s.data(), want_s.data(), got_s.size() * sizeof(float)));  // bit for bit
  EXPECT_EQ(got_l, want_l);

  memory.read({}, got_s, got_l);
  EXPECT_TRUE(got_s.empty() && got_l.empty());
  try {
    memory.read({3, 5000}, got_s, got_l);
    FAIL() << "no exception";
  } catch (const hpctrain::Error& e) {
    EXPECT_NE(std::string(e.what()).find("sample index 5000 is not in [0, 5000)"), std::string::npos) << e.what();
  }
}

// A batch of a source held in memory is not copied: read_batch points it at the source's rows
// (the model's input gathers them), with the reader's labels; the rows are the reader's bytes.
TEST(InMemoryDataset, BatchesPointAtTheResidentRowsWithTheReadersValues) {
  TempDir dir;
  RawDataset d;
  d.count = 103;
  d.sample_dims = {1, 3, 3};
  const std::string path = dir.file("resident.h5");
  io::test::write_dataset_file(path, d);
  const io::DatasetReader reader(path);
  const io::InMemoryDataset memory(reader);
  EXPECT_FALSE(reader.resident().has_value());  // a file is read, never pointed at
  ASSERT_TRUE(memory.resident().has_value());
  for (int rank = 0; rank < 2; ++rank) {
    const io::EpochPlan plan(103, 10, rank, 2, 11, /*drop_last=*/false);
    for (std::int64_t b = 0; b < plan.batches_per_epoch(); ++b) {
      const io::Batch want = io::read_batch(reader, plan, 1, b);
      const io::Batch got = io::read_batch(memory, plan, 1, b);
      ASSERT_EQ(want.resident, nullptr);
      ASSERT_EQ(got.resident, memory.resident()->samples);
      EXPECT_TRUE(got.samples.empty());
      EXPECT_EQ(got.sample_indices, want.sample_indices);
      EXPECT_EQ(got.count, want.count);
      EXPECT_EQ(got.labels, want.labels);
      for (std::size_t k = 0; k < got.count; ++k) {
        EXPECT_EQ(0, std::memcmp(got.resident + got.sample_indices[k] * 9, want.samples.data() + k * 9, 9 * sizeof(float)))
            << "batch " << b << " sample " << k;
      }
    }
  }
}
