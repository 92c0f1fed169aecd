// IDX import: the real Fashion-MNIST test set, synthetic files, and every kind of bad input.
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <set>

#include "hpctrain/io/dataset.hpp"
#include "hpctrain/io/idx_import.hpp"
#include "io_test_support.hpp"

namespace io = hpctrain::io;
namespace fs = std::filesystem;
using io::test::TempDir;

namespace {

// Independent decode: the whole file through zlib, header skipped by its documented size.
std::vector<unsigned char> gunzip_all(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  EXPECT_NE(f, nullptr) << path;
  std::vector<unsigned char> out;
  unsigned char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.insert(out.end(), buf, buf + n);
  gzclose(f);
  return out;
}

/// Runs `fn`, expects hpctrain::Error whose message contains every string in `parts`.
void expect_error(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no exception; expected one mentioning '" << parts.front() << "'";
  } catch (const hpctrain::Error& e) {
    for (const auto& p : parts) {
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
          << "message lacks '" << p << "': " << e.what();
    }
  }
}

}  // namespace

TEST(IdxImport, FashionMnistTestSetMatchesIndependentDecode) {
  TempDir dir;
  const std::string images = io::test::fashion_file("t10k-images-idx3-ubyte.gz");
  const std::string labels = io::test::fashion_file("t10k-labels-idx1-ubyte.gz");
  ASSERT_TRUE(fs::exists(images)) << "install dataset-fashion-mnist (scripts/install-deps.sh)";
  const std::string out = dir.file("fashion-test.h5");

  io::IdxImportResult r = io::import_idx(images, labels, out, io::IdxImportOptions::fashion_mnist());
  EXPECT_EQ(r.count, 10000);
  EXPECT_EQ(r.sample_shape, (std::vector<std::int64_t>{1, 28, 28}));
  EXPECT_EQ(r.classes, 10);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"fashion-test.h5"});  // no temp file left

  io::DatasetReader reader(out);
  const io::DatasetInfo& info = reader.info();
  EXPECT_EQ(info.count, 10000);
  EXPECT_EQ(info.sample_shape, (std::vector<std::int64_t>{1, 28, 28}));
  EXPECT_EQ(info.sample_size, 784);
  EXPECT_EQ(info.classes, 10);
  EXPECT_EQ(info.stored_type, io::SampleType::uint8);
  EXPECT_EQ(info.class_names, io::fashion_mnist_class_names());
  EXPECT_NE(info.source.find("t10k-images-idx3-ubyte.gz"), std::string::npos) << info.source;
  EXPECT_NE(info.source.find("t10k-labels-idx1-ubyte.gz"), std::string::npos) << info.source;

  const auto raw_images = gunzip_all(images);
  const auto raw_labels = gunzip_all(labels);
  ASSERT_EQ(raw_images.size(), 16u + 10000u * 784u);
  ASSERT_EQ(raw_labels.size(), 8u + 10000u);

  std::vector<std::int64_t> idx = {9999, 0, 1, 5000, 1, 4242, 9998, 17};
  for (std::int64_t i = 100; i < 10000; i += 997) idx.push_back(i);
  std::vector<float> samples;
  std::vector<std::int32_t> got_labels;
  reader.read(idx, samples, got_labels);
  ASSERT_EQ(samples.size(), idx.size() * 784);
  std::set<int> seen_labels;
  for (std::size_t k = 0; k < idx.size(); ++k) {
    const auto i = static_cast<std::size_t>(idx[k]);
    EXPECT_EQ(got_labels[k], raw_labels[8 + i]) << "sample " << i;
    seen_labels.insert(got_labels[k]);
    for (std::size_t e = 0; e < 784; ++e) {
      const float expected = static_cast<float>(raw_images[16 + i * 784 + e]) / 255.0f;
      ASSERT_NEAR(samples[k * 784 + e], expected, 1e-6f) << "sample " << i << " element " << e;
    }
  }
  EXPECT_GT(seen_labels.size(), 3u);  // the probe indices are not all one class
}

TEST(IdxImport, PlainAndGzipGiveTheSameData) {
  TempDir dir;
  TempDir dir2;
  auto [img, lab] = io::test::write_synthetic_idx(dir.path(), 37, 5, 6, false);
  auto [gimg, glab] = io::test::write_synthetic_idx(dir2.path(), 37, 5, 6, true);
  io::IdxImportOptions opts;
  opts.chunk_samples = 8;  // several chunks, the last one partial
  io::import_idx(img, lab, dir.file("plain.h5"), opts);
  io::import_idx(gimg, glab, dir.file("gz.h5"), opts);
  io::DatasetReader a(dir.file("plain.h5"));
  io::DatasetReader b(dir.file("gz.h5"));
  EXPECT_EQ(a.info().count, 37);
  EXPECT_EQ(a.info().sample_shape, (std::vector<std::int64_t>{1, 5, 6}));
  EXPECT_EQ(a.info().classes, 10);  // largest label + 1
  std::vector<std::int64_t> all(37);
  for (int i = 0; i < 37; ++i) all[static_cast<std::size_t>(i)] = 36 - i;
  std::vector<float> sa, sb;
  std::vector<std::int32_t> la, lb;
  a.read(all, sa, la);
  b.read(all, sb, lb);
  EXPECT_EQ(sa, sb);
  EXPECT_EQ(la, lb);
  for (std::size_t k = 0; k < all.size(); ++k) {
    EXPECT_EQ(la[k], io::test::synthetic_label(all[k], 10));
    for (std::int64_t e = 0; e < 30; ++e) {
      ASSERT_NEAR(sa[k * 30 + static_cast<std::size_t>(e)],
                  io::test::synthetic_pixel(all[k], e) / 255.0f, 1e-6f);
    }
  }
}

TEST(IdxImport, Float32LimitAndCompressionOptions) {
  TempDir dir;
  auto [img, lab] = io::test::write_synthetic_idx(dir.path(), 40, 4, 4, true);
  io::IdxImportOptions opts;
  opts.sample_type = io::SampleType::float32;
  opts.limit = 25;
  opts.compression_level = 6;
  opts.classes = 12;
  auto r = io::import_idx(img, lab, dir.file("f.h5"), opts);
  EXPECT_EQ(r.count, 25);
  EXPECT_EQ(r.classes, 12);
  io::DatasetReader reader(dir.file("f.h5"));
  EXPECT_EQ(reader.info().stored_type, io::SampleType::float32);
  EXPECT_EQ(reader.info().count, 25);
  EXPECT_EQ(reader.info().classes, 12);
  EXPECT_NE(reader.info().source.find("first 25 of 40"), std::string::npos) << reader.info().source;
  std::vector<float> s;
  std::vector<std::int32_t> l;
  reader.read({24, 3}, s, l);
  EXPECT_NEAR(s[0], io::test::synthetic_pixel(24, 0) / 255.0f, 1e-6f);
  EXPECT_NEAR(s[16 + 5], io::test::synthetic_pixel(3, 5) / 255.0f, 1e-6f);
  EXPECT_EQ(l[1], io::test::synthetic_label(3, 10));

  // Normalisation options: (x - mean) / stddev.
  io::DatasetReaderOptions ropts;
  ropts.mean = 0.5f;
  ropts.stddev = 0.25f;
  io::DatasetReader normalised(dir.file("f.h5"), ropts);
  std::vector<float> s2;
  normalised.read({24}, s2, l);
  EXPECT_NEAR(s2[0], (io::test::synthetic_pixel(24, 0) / 255.0f - 0.5f) / 0.25f, 1e-5f);
}

TEST(IdxImport, TwoDimensionalImagesBecomeFeatureVectors) {
  TempDir dir;
  std::vector<unsigned char> px(3 * 5);
  for (std::size_t i = 0; i < px.size(); ++i) px[i] = static_cast<unsigned char>(i * 10);
  io::test::write_file(dir.file("img"), io::test::idx_bytes(0x08, {3, 5}, px), false);
  io::test::write_file(dir.file("lab"), io::test::idx_bytes(0x08, {3}, {0, 1, 1}), false);
  auto r = io::import_idx(dir.file("img"), dir.file("lab"), dir.file("o.h5"));
  EXPECT_EQ(r.sample_shape, std::vector<std::int64_t>{5});
  EXPECT_EQ(r.classes, 2);
}

// ---- bad inputs: one clear error naming the file and the reason; nothing left behind ----

class IdxImportBadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    auto p = io::test::write_synthetic_idx(dir.path(), 20, 3, 3, true);
    images = p.first;
    labels = p.second;
    out = dir.file("out.h5");
    before = dir.entries();
    std::sort(before.begin(), before.end());
  }
  /// The directory holds what it held before the failed import (no output, no temp file).
  void expect_nothing_left() {
    auto now = dir.entries();
    std::sort(now.begin(), now.end());
    EXPECT_EQ(now, before);
  }
  TempDir dir;
  std::string images, labels, out;
  std::vector<std::string> before;
};

TEST_F(IdxImportBadInput, MissingFile) {
  const std::string missing = dir.file("nope.gz");
  expect_error([&] { io::import_idx(missing, labels, out); },
               {"images file '" + missing + "'", "no such file"});
  expect_error([&] { io::import_idx(images, missing, out); },
               {"labels file '" + missing + "'", "no such file"});
  expect_nothing_left();
}

TEST_F(IdxImportBadInput, WrongMagic) {
  const std::string bad = dir.file("bad-magic");
  io::test::write_file(bad, {0x1f, 0x00, 0x08, 0x03, 0, 0, 0, 1}, false);
  before.push_back("bad-magic");
  std::sort(before.begin(), before.end());
  expect_error([&] { io::import_idx(bad, labels, out); },
               {"images file '" + bad + "'", "wrong magic number 0x1f000803"});
  expect_nothing_left();
}

TEST_F(IdxImportBadInput, WrongTypeAndDimensions) {
  const std::string f32 = dir.file("float-images");
  io::test::write_file(f32, io::test::idx_bytes(0x0D, {1, 1, 1}, {0, 0, 0, 0}), false);
  expect_error([&] { io::import_idx(f32, labels, out); },
               {"images file '" + f32 + "'", "type byte 0x0d (float32)", "expected 0x08"});
  const std::string lab2d = dir.file("labels-2d");
  io::test::write_file(lab2d, io::test::idx_bytes(0x08, {2, 1}, {0, 1}), false);
  expect_error([&] { io::import_idx(images, lab2d, out); },
               {"labels file '" + lab2d + "'", "has 2 dimensions"});
  const std::string img4d = dir.file("images-4d");
  io::test::write_file(img4d, io::test::idx_bytes(0x08, {1, 1, 1, 1}, {0}), false);
  expect_error([&] { io::import_idx(img4d, labels, out); },
               {"images file '" + img4d + "'", "has 4 dimensions"});
  EXPECT_FALSE(fs::exists(out));
}

TEST_F(IdxImportBadInput, TruncatedFiles) {
  // Gzip whose content stops inside the pixel data, and a plain file cut inside the header.
  std::vector<unsigned char> px(20 * 9 - 5, 1);
  const std::string cut = dir.file("cut.gz");
  io::test::write_file(cut, io::test::idx_bytes(0x08, {20, 3, 3}, px), true);
  expect_error([&] { io::import_idx(cut, labels, out); },
               {"images file '" + cut + "'", "truncated"});
  const std::string hdr = dir.file("cut-header");
  io::test::write_file(hdr, {0, 0, 8, 3, 0, 0}, false);
  expect_error([&] { io::import_idx(hdr, labels, out); },
               {"images file '" + hdr + "'", "truncated", "dimension sizes"});
  const std::string lab = dir.file("cut-labels");
  io::test::write_file(lab, io::test::idx_bytes(0x08, {20}, std::vector<unsigned char>(19, 0)),
                       false);
  expect_error([&] { io::import_idx(images, lab, out); },
               {"labels file '" + lab + "'", "truncated"});
  EXPECT_FALSE(fs::exists(out));
  for (const auto& e : dir.entries()) EXPECT_EQ(e.find(".tmp-"), std::string::npos) << e;
}

// A header claiming far more data than the file can hold is refused before the importer
// allocates it (found by fuzz.idx: a 42-byte file made it allocate 2 GiB).
TEST_F(IdxImportBadInput, HeaderClaimingMoreThanTheFileHolds) {
  const std::string plain = dir.file("huge-plain"), gz = dir.file("huge.gz");
  io::test::write_file(plain, io::test::idx_bytes(0x08, {20, 40000, 40000}, {1, 2, 3}), false);
  expect_error([&] { io::import_idx(plain, labels, out); },
               {"images file '" + plain + "'", "20 x 1600000000 bytes of pixels", "plain file can hold"});
  io::test::write_file(gz, io::test::idx_bytes(0x08, {20, 40000, 40000}, {1, 2, 3}), true);
  expect_error([&] { io::import_idx(gz, labels, out); },
               {"images file '" + gz + "'", "gzip file can hold"});
  const std::string lab = dir.file("huge-labels");
  io::test::write_file(lab, io::test::idx_bytes(0x08, {2000000000}, {0, 1}), false);
  expect_error([&] { io::import_idx(images, lab, out); },
               {"labels file '" + lab + "'", "2000000000 x 1 bytes of labels"});
  EXPECT_FALSE(fs::exists(out));
}

TEST_F(IdxImportBadInput, TrailingData) {
  std::vector<unsigned char> px(20 * 9 + 3, 1);
  const std::string longer = dir.file("long.gz");
  io::test::write_file(longer, io::test::idx_bytes(0x08, {20, 3, 3}, px), true);
  expect_error([&] { io::import_idx(longer, labels, out); },
               {"images file '" + longer + "'", "trailing data"});
  EXPECT_FALSE(fs::exists(out));
  for (const auto& e : dir.entries()) EXPECT_EQ(e.find(".tmp-"), std::string::npos) << e;
}

TEST_F(IdxImportBadInput, CountMismatch) {
  const std::string lab = dir.file("labels-19");
  io::test::write_file(lab, io::test::idx_bytes(0x08, {19}, std::vector<unsigned char>(19, 0)),
                       false);
  expect_error([&] { io::import_idx(images, lab, out); },
               {"'" + images + "' holds 20 samples", "'" + lab + "' holds 19 labels"});
  EXPECT_FALSE(fs::exists(out));
}

TEST_F(IdxImportBadInput, LabelOutOfRangeForGivenClasses) {
  io::IdxImportOptions opts;
  opts.classes = 5;  // synthetic labels go up to 9
  expect_error([&] { io::import_idx(images, labels, out, opts); },
               {"labels file '" + labels + "'", "outside [0, 5)"});
  expect_nothing_left();
}

TEST_F(IdxImportBadInput, FailedImportKeepsTheOldOutput) {
  io::test::write_file(out, {'o', 'l', 'd'}, false);
  const std::string missing = dir.file("nope");
  EXPECT_THROW(io::import_idx(missing, labels, out), hpctrain::Error);
  std::vector<unsigned char> cut(20);
  const std::string bad = dir.file("short.gz");
  io::test::write_file(bad, io::test::idx_bytes(0x08, {20, 3, 3}, cut), true);
  EXPECT_THROW(io::import_idx(bad, labels, out), hpctrain::Error);
  EXPECT_EQ(fs::file_size(out), 3u);  // untouched
  for (const auto& e : dir.entries()) EXPECT_EQ(e.find(".tmp-"), std::string::npos) << e;
  // And a good import replaces it.
  io::import_idx(images, labels, out);
  EXPECT_GT(fs::file_size(out), 3u);
}

TEST_F(IdxImportBadInput, MissingOutputDirectory) {
  const std::string o = dir.file("no/such/dir/out.h5");
  expect_error([&] { io::import_idx(images, labels, o); },
               {"output directory '" + dir.file("no/such/dir") + "' does not exist"});
}
