// DatasetReader's direct reads (pread at the rows' file addresses, direct_sample_reads.hpp): the
// same values as reads through HDF5 for chunked and contiguous datasets, uint8 and float32, runs
// that cross chunk ends and a partial last chunk; files whose layout does not allow it (chunks
// that split a sample, compression) fall back to HDF5 and still read the same values.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <random>

#include "hpctrain/base/error.hpp"
#include "hpctrain/io/dataset.hpp"
#include "hpctrain/io/idx_import.hpp"
#include "hpctrain/io/synthetic_dataset.hpp"
#include "io_test_support.hpp"

namespace io = hpctrain::io;
using io::test::TempDir;

namespace {

/// Reads `idx` through a direct reader and an HDF5-only reader of `path`; they must agree.
void expect_direct_equals_hdf5(const std::string& path, bool expect_direct, std::vector<std::int64_t> idx) {
  io::DatasetReaderOptions hdf5_only;
  hdf5_only.direct_reads = false;
  const io::DatasetReader direct(path), through_hdf5(path, hdf5_only);
  EXPECT_EQ(direct.reads_directly(), expect_direct) << path;
  EXPECT_FALSE(through_hdf5.reads_directly());
  std::vector<float> a, b;
  std::vector<std::int32_t> la, lb;
  direct.read(idx, a, la);
  through_hdf5.read(idx, b, lb);
  ASSERT_EQ(a.size(), idx.size() * static_cast<std::size_t>(direct.info().sample_size));
  EXPECT_TRUE(a == b) << path << ": samples differ";
  EXPECT_TRUE(la == lb) << path << ": labels differ";
}

/// Every index once, shuffled, then runs across chunk ends and the last sample twice.
std::vector<std::int64_t> indices_for(std::int64_t count, std::int64_t chunk) {
  std::vector<std::int64_t> idx(static_cast<std::size_t>(count));
  std::iota(idx.begin(), idx.end(), 0);
  std::shuffle(idx.begin(), idx.end(), std::mt19937(5));
  for (std::int64_t i = chunk - 2; i < std::min(count, chunk + 3); ++i) idx.push_back(i);
  idx.push_back(count - 1);
  return idx;
}

}  // namespace

TEST(DirectReads, ChunkedSamplesAndContiguousLabelsWithAPartialLastChunk) {
  TempDir dir;
  io::test::RawDataset d;  // samples chunked by 7 rows, labels contiguous
  d.count = 52;
  io::test::write_dataset_file(dir.file("raw.h5"), d);
  expect_direct_equals_hdf5(dir.file("raw.h5"), true, indices_for(52, 7));
}

TEST(DirectReads, SynthesizedUint8AndFloat32) {
  TempDir dir;
  for (const io::SampleType type : {io::SampleType::uint8, io::SampleType::float32}) {
    io::SynthOptions o;
    o.samples = 2500;  // chunks of 1024: the last one partial
    o.shape = {1, 6, 5};
    o.type = type;
    const std::string path = dir.file(std::string(io::to_string(type)) + ".h5");
    io::synthesize_dataset(o, path);
    expect_direct_equals_hdf5(path, true, indices_for(2500, 1024));
  }
}

TEST(DirectReads, ChunksThatSplitASampleFallBackToHdf5) {
  TempDir dir;
  io::test::RawDataset d;
  d.chunk_sample_dims = {1, 2, 3};  // half a sample per chunk
  io::test::write_dataset_file(dir.file("split.h5"), d);
  expect_direct_equals_hdf5(dir.file("split.h5"), false, indices_for(50, 7));
}

TEST(DirectReads, CompressedImportFallsBackToHdf5) {
  TempDir dir;
  const auto [images, labels] = io::test::write_synthetic_idx(dir.path(), 300, 28, 28, /*gzip=*/true);
  io::IdxImportOptions options;
  options.compression_level = 4;
  options.chunk_samples = 64;
  io::import_idx(images, labels, dir.file("gz.h5"), options);
  expect_direct_equals_hdf5(dir.file("gz.h5"), false, indices_for(300, 64));
}

TEST(DirectReads, EnvironmentChoosesHdf5AndRejectsOtherValues) {
  TempDir dir;
  io::test::write_dataset_file(dir.file("raw.h5"), {});
  ::setenv("HPCTRAIN_DATA_READS", "hdf5", 1);
  EXPECT_FALSE(io::DatasetReader(dir.file("raw.h5")).reads_directly());
  ::setenv("HPCTRAIN_DATA_READS", "fast", 1);
  try {
    io::DatasetReader r(dir.file("raw.h5"));
    ADD_FAILURE() << "HPCTRAIN_DATA_READS=fast accepted";
  } catch (const hpctrain::Error& e) {
    EXPECT_NE(std::string(e.what()).find("HPCTRAIN_DATA_READS='fast': expected 'direct'"), std::string::npos)
        << e.what();
  }
  ::setenv("HPCTRAIN_DATA_READS", "direct", 1);
  EXPECT_TRUE(io::DatasetReader(dir.file("raw.h5")).reads_directly());
  ::unsetenv("HPCTRAIN_DATA_READS");
}
