// DatasetReader: reads by index against a file written with the raw HDF5 API, and rejects every
// kind of bad file with a message naming the file, the dataset and the reason.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <thread>

#include "hpctrain/io/dataset.hpp"
#include "io_test_support.hpp"

namespace io = hpctrain::io;
using io::test::RawDataset;
using io::test::TempDir;

namespace {

std::string open_error(const std::string& path, io::DatasetReaderOptions opts = {}) {
  try {
    io::DatasetReader r(path, opts);
  } catch (const hpctrain::Error& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)

}  // namespace

TEST(DatasetReader, ReadsScatteredIndicesInRequestedOrder) {
  TempDir dir;
  RawDataset d;
  d.count = 50;
  d.sample_dims = {2, 3, 2};  // 12 values per sample, chunks of 7 samples
  const std::string path = dir.file("raw.h5");
  io::test::write_dataset_file(path, d);

  io::DatasetReader reader(path);
  EXPECT_EQ(reader.info().count, 50);
  EXPECT_EQ(reader.info().sample_shape, (std::vector<std::int64_t>{2, 3, 2}));
  EXPECT_EQ(reader.info().sample_size, 12);
  EXPECT_EQ(reader.info().classes, 10);
  EXPECT_DOUBLE_EQ(reader.info().scale, 1.0 / 255.0);  // uint8 without a `scale` attribute

  // Unsorted, repeated, runs of consecutive indices across chunk borders, both ends.
  const std::vector<std::int64_t> idx = {49, 3, 4, 5, 6, 7, 8, 0, 3, 20, 13, 14, 48, 49};
  std::vector<float> s;
  std::vector<std::int32_t> l;
  reader.read(idx, s, l);
  ASSERT_EQ(s.size(), idx.size() * 12);
  ASSERT_EQ(l.size(), idx.size());
  for (std::size_t k = 0; k < idx.size(); ++k) {
    EXPECT_EQ(l[k], io::test::synthetic_label(idx[k], 10)) << k;
    for (std::int64_t e = 0; e < 12; ++e) {
      EXPECT_NEAR(s[k * 12 + static_cast<std::size_t>(e)],
                  io::test::synthetic_pixel(idx[k], e) / 255.0f, 1e-6f)
          << "index " << idx[k] << " element " << e;
    }
  }
  reader.read({}, s, l);
  EXPECT_TRUE(s.empty());
  EXPECT_TRUE(l.empty());

  try {
    reader.read({3, 50}, s, l);
    FAIL() << "no exception";
  } catch (const hpctrain::Error& e) {
    EXPECT_CONTAINS(e.what(), "'" + path + "' /samples: sample index 50 is not in [0, 50)");
  }
}

TEST(DatasetReader, MovedReaderStillReads) {
  TempDir dir;
  const std::string path = dir.file("raw.h5");
  io::test::write_dataset_file(path, RawDataset{});
  io::DatasetReader a(path);
  io::DatasetReader b(std::move(a));
  std::vector<float> s;
  std::vector<std::int32_t> l;
  b.read({1}, s, l);
  EXPECT_EQ(l[0], io::test::synthetic_label(1, 10));
}

TEST(DatasetReaderBadFile, MissingFile) {
  TempDir dir;
  const std::string path = dir.file("nothing.h5");
  std::string msg = open_error(path);
  EXPECT_CONTAINS(msg, "data set '" + path + "': no such file");
}

TEST(DatasetReaderBadFile, NotHdf5) {
  TempDir dir;
  const std::string path = dir.file("text.h5");
  io::test::write_file(path, std::vector<unsigned char>(1000, 'x'), false);
  EXPECT_CONTAINS(open_error(path), "data set '" + path + "': not an HDF5 file");
}

TEST(DatasetReaderBadFile, TruncatedHdf5) {
  TempDir dir;
  const std::string path = dir.file("raw.h5");
  io::test::write_dataset_file(path, RawDataset{});
  std::filesystem::resize_file(path, 1000);  // keeps the signature, loses the rest
  std::string msg = open_error(path);
  EXPECT_CONTAINS(msg, "data set '" + path + "'");
  EXPECT_CONTAINS(msg, "truncated");  // HDF5's reason, taken from its error stack
}

TEST(DatasetReaderBadFile, MissingLabels) {
  TempDir dir;
  const std::string path = dir.file("raw.h5");
  RawDataset d;
  d.write_labels = false;
  io::test::write_dataset_file(path, d);
  EXPECT_CONTAINS(open_error(path), "data set '" + path + "' /labels: dataset is missing");
}

TEST(DatasetReaderBadFile, MissingSamples) {
  TempDir dir;
  const std::string path = dir.file("raw.h5");
  RawDataset d;
  d.write_samples = false;
  io::test::write_dataset_file(path, d);
  EXPECT_CONTAINS(open_error(path), "data set '" + path + "' /samples: dataset is missing");
}

TEST(DatasetReaderBadFile, LabelOutOfRange) {
  TempDir dir;
  const std::string path = dir.file("raw.h5");
  RawDataset d;
  d.bad_label_index = 33;
  d.bad_label_value = 10;  // classes = 10
  io::test::write_dataset_file(path, d);
  EXPECT_CONTAINS(open_error(path),
                  "data set '" + path + "' /labels: label 10 at index 33 is outside [0, 10)");
  d.bad_label_value = -1;
  io::test::write_dataset_file(path, d);
  EXPECT_CONTAINS(open_error(path), "label -1 at index 33");

  // With the scan at open switched off, the batch that holds the label still fails.
  io::DatasetReaderOptions opts;
  opts.validate_labels = false;
  io::DatasetReader reader(path, opts);
  std::vector<float> s;
  std::vector<std::int32_t> l;
  reader.read({1, 2}, s, l);
  try {
    reader.read({32, 33}, s, l);
    FAIL() << "no exception";
  } catch (const hpctrain::Error& e) {
    EXPECT_CONTAINS(e.what(), "'" + path + "' /labels: label -1 at index 33");
  }
}

TEST(DatasetReaderBadFile, LabelCountDiffersFromSampleCount) {
  TempDir dir;
  const std::string path = dir.file("raw.h5");
  RawDataset d;
  d.label_count = 49;
  io::test::write_dataset_file(path, d);
  EXPECT_CONTAINS(open_error(path),
                  "data set '" + path + "' /labels: holds 49 labels but /samples holds 50");
}

TEST(DatasetReaderBadFile, ShapeAttributeDisagreesWithSamples) {
  TempDir dir;
  const std::string path = dir.file("raw.h5");
  RawDataset d;
  d.shape_attr = {1, 28, 28};  // samples are 1 x 4 x 3
  io::test::write_dataset_file(path, d);
  EXPECT_CONTAINS(open_error(path), "data set '" + path +
                                        "': attribute 'shape' = [1, 28, 28] but /samples "
                                        "holds samples of shape [1, 4, 3]");
}

TEST(DatasetReaderBadFile, SamplesOfRankOne) {
  TempDir dir;
  const std::string path = dir.file("raw.h5");
  RawDataset d;
  d.sample_dims = {};
  d.shape_attr = {0};
  io::test::write_dataset_file(path, d);
  EXPECT_CONTAINS(open_error(path), "'" + path + "' /samples: has 1 dimension(s)");
}

TEST(DatasetReader, RequireCompatibleWithModel) {
  TempDir dir;
  const std::string path = dir.file("raw.h5");
  io::test::write_dataset_file(path, RawDataset{});  // 1 x 4 x 3, 10 classes
  io::DatasetReader reader(path);
  EXPECT_NO_THROW(reader.require_compatible({1, 4, 3}, 10));  // CNN: NCHW
  EXPECT_NO_THROW(reader.require_compatible({12}, 10));       // MLP: flattened
  try {
    reader.require_compatible({784}, 10);
    FAIL() << "no exception";
  } catch (const hpctrain::Error& e) {
    EXPECT_CONTAINS(e.what(), "data set '" + path +
                                  "' /samples: samples have shape [1, 4, 3] (12 values) but "
                                  "the model's input is [784]");
  }
  try {
    reader.require_compatible({12}, 5);
    FAIL() << "no exception";
  } catch (const hpctrain::Error& e) {
    EXPECT_CONTAINS(e.what(), "10 classes but the model has 5 outputs");
  }
}

// A file changed under an open reader: the next read names the file and the change.
namespace {
std::string read_error(const io::DatasetReader& r) {
  std::vector<float> s;
  std::vector<std::int32_t> l;
  try {
    r.read({0, 1}, s, l);
  } catch (const hpctrain::Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(DatasetReaderChangedFile, TruncatedWhileOpen) {
  TempDir dir;
  const std::string path = dir.file("raw.h5");
  io::test::write_dataset_file(path, RawDataset{});
  const io::DatasetReader r(path);
  EXPECT_EQ(read_error(r), "");
  const auto size = std::filesystem::file_size(path);
  std::filesystem::resize_file(path, 5000);
  const std::string msg = read_error(r);
  EXPECT_CONTAINS(msg, "data set '" + path + "' changed while this job reads it: size " + std::to_string(size) +
                           " -> 5000 bytes (truncated)");
}

TEST(DatasetReaderChangedFile, ReplacedByAnotherFile) {
  TempDir dir;
  const std::string path = dir.file("raw.h5"), other = dir.file("other.h5");
  io::test::write_dataset_file(path, RawDataset{});
  const io::DatasetReader r(path);
  io::test::write_dataset_file(other, RawDataset{});
  std::filesystem::rename(other, path);
  EXPECT_CONTAINS(read_error(r), "it is another file now (device:inode ");
}

TEST(DatasetReaderChangedFile, RewrittenWithItsTimestampsKept) {
  // Same size, same modification time (cp -p): the status-change time still moves.
  TempDir dir;
  const std::string path = dir.file("raw.h5");
  io::test::write_dataset_file(path, RawDataset{});
  const auto mtime = std::filesystem::last_write_time(path);
  const io::DatasetReader r(path);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // past the file system's clock tick
  std::filesystem::permissions(path, std::filesystem::perms::owner_exec, std::filesystem::perm_options::add);
  std::filesystem::last_write_time(path, mtime);
  EXPECT_CONTAINS(read_error(r), "status change time ");
}

TEST(DatasetReaderChangedFile, Removed) {
  TempDir dir;
  const std::string path = dir.file("raw.h5");
  io::test::write_dataset_file(path, RawDataset{});
  const io::DatasetReader r(path);
  std::filesystem::remove(path);
  EXPECT_CONTAINS(read_error(r), "data set '" + path + "' changed while this job reads it: it cannot be stat'ed any more");
}
