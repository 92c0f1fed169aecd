// data synth: a readable hpctrain data set, the same bytes for the same options whatever the
// block size, different contents for another seed, and clear errors for bad options.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <numeric>

#include "hpctrain/io/synthetic_dataset.hpp"
#include "io_test_support.hpp"

namespace io = hpctrain::io;
using io::test::TempDir;

namespace {
std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
}  // namespace

TEST(SyntheticDataset, ReadableDeterministicAndSeeded) {
  TempDir dir;
  io::SynthOptions o;
  o.samples = 1000;
  o.shape = {1, 5, 7};
  o.classes = 3;
  o.seed = 11;
  o.block_samples = 64;
  const auto info = io::synthesize_dataset(o, dir.file("a.h5"));
  EXPECT_EQ(info.count, 1000);
  o.block_samples = 1000;  // another block size: the same bytes
  io::synthesize_dataset(o, dir.file("b.h5"));
  EXPECT_TRUE(file_bytes(dir.file("a.h5")) == file_bytes(dir.file("b.h5")));
  o.seed = 12;
  io::synthesize_dataset(o, dir.file("c.h5"));
  EXPECT_TRUE(file_bytes(dir.file("a.h5")) != file_bytes(dir.file("c.h5")));

  const io::DatasetReader r(dir.file("a.h5"));
  EXPECT_EQ(r.info().sample_shape, (std::vector<std::int64_t>{1, 5, 7}));
  EXPECT_EQ(r.info().classes, 3);
  std::vector<std::int64_t> idx(1000);
  std::iota(idx.begin(), idx.end(), 0);
  std::vector<float> s;
  std::vector<std::int32_t> l;
  r.read(idx, s, l);
  std::vector<int> per_class(3, 0);
  for (const std::int32_t c : l) {
    ASSERT_TRUE(c >= 0 && c < 3);
    ++per_class[static_cast<std::size_t>(c)];
  }
  for (const int n : per_class) EXPECT_GT(n, 250);  // roughly uniform labels
  for (const float v : s) ASSERT_TRUE(v >= 0.0f && v <= 1.0f);
}

TEST(SyntheticDataset, RejectsBadOptions) {
  TempDir dir;
  io::SynthOptions o;
  o.samples = 0;
  EXPECT_THROW(io::synthesize_dataset(o, dir.file("x.h5")), hpctrain::Error);
  o.samples = 10;
  o.shape = {1, 0, 3};
  EXPECT_THROW(io::synthesize_dataset(o, dir.file("x.h5")), hpctrain::Error);
  o.shape = {4};
  o.classes = 0;
  EXPECT_THROW(io::synthesize_dataset(o, dir.file("x.h5")), hpctrain::Error);
  o.classes = 2;
  EXPECT_THROW(io::synthesize_dataset(o, dir.file("no-such-dir/x.h5")), hpctrain::Error);
}
