// Sharded data sets (`hpctrain data shard`): a directory of shard files reads the same values as
// the file it was split from, at any index order; shard files open only when a read needs them;
// the split is deterministic and atomic; a bad index or a shard that does not match is refused by
// name.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>
#include <random>
#include <tuple>

#include <fmt/format.h>

#include "hpctrain/base/error.hpp"
#include "hpctrain/io/dataset_shards.hpp"
#include "hpctrain/io/synthetic_dataset.hpp"
#include "io_test_support.hpp"

namespace io = hpctrain::io;
namespace fs = std::filesystem;
using io::test::TempDir;

namespace {

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

/// The message of what `fn` throws (an hpctrain::Error), or a failure when it does not throw.
template <typename F>
std::string error_of(F&& fn) {
  try {
    fn();
  } catch (const hpctrain::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no hpctrain::Error thrown";
  return {};
}

std::string synth(const TempDir& dir, const std::string& name, std::int64_t samples, io::SampleType type) {
  io::SynthOptions o;
  o.samples = samples;
  o.shape = {1, 4, 3};
  o.classes = 5;
  o.seed = 7;
  o.type = type;
  io::synthesize_dataset(o, dir.file(name));
  return dir.file(name);
}

void expect_same_reads(const io::DatasetReader& a, const io::DatasetReader& b, const std::vector<std::int64_t>& idx) {
  std::vector<float> sa, sb;
  std::vector<std::int32_t> la, lb;
  a.read(idx, sa, la);
  b.read(idx, sb, lb);
  ASSERT_EQ(sa.size(), idx.size() * static_cast<std::size_t>(a.info().sample_size));
  EXPECT_TRUE(sa == sb) << "samples differ";
  EXPECT_TRUE(la == lb) << "labels differ";
}

}  // namespace

TEST(DatasetShards, ReadsTheSameValuesAsTheFileAtAnyShardCount) {
  TempDir dir;
  for (const io::SampleType type : {io::SampleType::uint8, io::SampleType::float32}) {
    const std::string file = synth(dir, std::string("d-") + io::to_string(type) + ".h5", 101, type);
    for (const std::int64_t k : {1, 3, 7, 101}) {
      const std::string out = dir.file(fmt::format("s-{}-{}", io::to_string(type), k));
      const io::ShardResult r = io::split_dataset(file, out, {k, /*block_samples=*/5});
      ASSERT_EQ(static_cast<std::int64_t>(r.index.shards.size()), k);
      std::int64_t smallest = 101, largest = 0;
      for (const auto& e : r.index.shards) {
        smallest = std::min(smallest, e.count);
        largest = std::max(largest, e.count);
      }
      EXPECT_LE(largest - smallest, 1) << "K = " << k;

      io::DatasetReaderOptions opts;
      opts.mean = 0.25f;
      opts.stddev = 0.5f;
      const io::DatasetReader whole(file, opts), sharded(out, opts);
      EXPECT_EQ(sharded.info().count, 101);
      EXPECT_EQ(sharded.info().sample_shape, whole.info().sample_shape);
      EXPECT_EQ(sharded.info().classes, whole.info().classes);
      EXPECT_EQ(sharded.info().stored_type, type);
      EXPECT_EQ(sharded.info().source, whole.info().source);
      std::vector<std::int64_t> all(101);
      std::iota(all.begin(), all.end(), 0);
      expect_same_reads(whole, sharded, all);
      std::mt19937 rng(static_cast<unsigned>(k));
      std::vector<std::int64_t> scattered;
      for (int n = 0; n < 60; ++n) scattered.push_back(static_cast<std::int64_t>(rng() % 101));
      scattered.push_back(scattered.front());  // a repeat
      expect_same_reads(whole, sharded, scattered);
    }
  }
}

TEST(DatasetShards, OpensOnlyTheShardsAReadNeeds) {
  TempDir dir;
  const std::string file = synth(dir, "d.h5", 90, io::SampleType::uint8);
  const std::string out = dir.file("s");
  io::split_dataset(file, out, {3});  // shards of 30: [0, 30), [30, 60), [60, 90)
  // Shard 2 removed: a reader of the directory still opens, and reads shards 0 and 1.
  fs::remove(out + "/shard-00002.h5");
  const io::DatasetReader reader(out);
  EXPECT_EQ(reader.open_file_count(), 0u);
  std::vector<float> s;
  std::vector<std::int32_t> l;
  reader.read({3, 1, 29}, s, l);
  EXPECT_EQ(reader.open_file_count(), 1u);
  reader.read({31, 2}, s, l);
  EXPECT_EQ(reader.open_file_count(), 2u);
  const std::string why = error_of([&] { reader.read({10, 75}, s, l); });
  EXPECT_NE(why.find("shard-00002.h5"), std::string::npos) << why;
  EXPECT_NE(why.find("no such file"), std::string::npos) << why;
  const std::string range = error_of([&] { reader.read({90}, s, l); });
  EXPECT_NE(range.find("sample index 90 is not in [0, 90)"), std::string::npos) << range;
}

TEST(DatasetShards, MapsAGlobalRangeToThePiecesOfItsShards) {
  TempDir dir;
  const std::string file = synth(dir, "d.h5", 10, io::SampleType::uint8);
  const std::string out = dir.file("s");
  io::split_dataset(file, out, {3});  // [0, 3), [3, 6), [6, 10)
  const io::ShardIndex index = io::read_shard_index(out);
  using Piece = std::tuple<std::size_t, std::int64_t, std::int64_t>;
  const auto pieces = [&](std::int64_t first, std::int64_t count) {
    std::vector<Piece> v;
    for (const io::ShardPiece& p : io::shards_overlapping(index, first, count)) v.emplace_back(p.shard, p.first, p.count);
    return v;
  };
  EXPECT_EQ(pieces(0, 10), (std::vector<Piece>{{0, 0, 3}, {1, 0, 3}, {2, 0, 4}}));
  EXPECT_EQ(pieces(2, 5), (std::vector<Piece>{{0, 2, 1}, {1, 0, 3}, {2, 0, 1}}));
  EXPECT_EQ(pieces(3, 3), (std::vector<Piece>{{1, 0, 3}}));
  EXPECT_EQ(pieces(9, 1), (std::vector<Piece>{{2, 3, 1}}));
  EXPECT_TRUE(pieces(4, 0).empty());
  EXPECT_TRUE(pieces(10, 0).empty());
  const std::string why = error_of([&] { io::shards_overlapping(index, 8, 3); });
  EXPECT_NE(why.find("samples [8, 11) are not inside its 10 samples"), std::string::npos) << why;
}

TEST(DatasetShards, SplitIsDeterministicAndAtomic) {
  TempDir dir;
  const std::string file = synth(dir, "d.h5", 50, io::SampleType::uint8);
  io::split_dataset(file, dir.file("a"), {4, 3});
  io::split_dataset(file, dir.file("b"), {4, 16});  // another block size: the same bytes
  for (const char* name : {"index.json", "shard-00000.h5", "shard-00003.h5"}) {
    EXPECT_TRUE(file_bytes(dir.file(std::string("a/") + name)) ==
                file_bytes(dir.file(std::string("b/") + name)))
        << name;
  }
  // Refused: an existing output, a K outside [1, N], a sharded input, a missing parent. Nothing
  // is left behind (no partial directory).
  EXPECT_NE(error_of([&] { io::split_dataset(file, dir.file("a"), {2}); }).find("already exists"), std::string::npos);
  EXPECT_NE(error_of([&] { io::split_dataset(file, dir.file("c"), {51}); }).find("--shards 51 must lie in [1, 50]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { io::split_dataset(file, dir.file("c"), {0}); }).find("--shards 0"), std::string::npos);
  EXPECT_NE(error_of([&] { io::split_dataset(dir.file("a"), dir.file("c"), {2}); }).find("already a sharded"),
            std::string::npos);
  EXPECT_NE(error_of([&] { io::split_dataset(file, dir.file("no/c"), {2}); }).find("does not exist"),
            std::string::npos);
  auto entries = dir.entries();
  std::sort(entries.begin(), entries.end());
  EXPECT_EQ(entries, (std::vector<std::string>{"a", "b", "d.h5"}));
}

TEST(DatasetShards, RefusesABadIndexOrAShardThatDoesNotMatchIt) {
  TempDir dir;
  const std::string file = synth(dir, "d.h5", 40, io::SampleType::uint8);
  const std::string out = dir.file("s");
  io::split_dataset(file, out, {2});
  const std::string index = out + "/index.json";
  const std::string good = file_bytes(index);
  const auto with = [&](const std::string& from, const std::string& to) {
    std::string text = good;
    const auto at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
    write_text(index, text);
  };
  const auto open_error = [&] { return error_of([&] { io::DatasetReader r(out); }); };

  with("\"first\": 20", "\"first\": 21");
  EXPECT_NE(open_error().find("\"first\" = 21, expected 20"), std::string::npos) << open_error();
  with("\"count\": 40", "\"count\": 41");
  EXPECT_NE(open_error().find("the shards hold 40 samples but \"count\" = 41"), std::string::npos) << open_error();
  with("hpctrain-dataset-shards", "something-else");
  EXPECT_NE(open_error().find("\"format\" = \"something-else\""), std::string::npos) << open_error();
  with("\"file\": \"shard-00001.h5\"", "\"file\": \"../d.h5\"");
  EXPECT_NE(open_error().find("must name a file inside the directory"), std::string::npos) << open_error();
  with("\"sample_type\": \"uint8\"", "\"sample_type\": \"int16\"");
  EXPECT_NE(open_error().find("is not uint8 or float32"), std::string::npos) << open_error();
  // "classes": 0 is for regression sets ("targets": true) only.
  const auto classes_at = good.find("\"classes\": ");
  const std::string classes = good.substr(classes_at, good.find(',', classes_at) - classes_at);
  with(classes, "\"classes\": 0");
  EXPECT_NE(open_error().find("\"classes\" = 0 is not a positive class count (0 only with \"targets\": true)"),
            std::string::npos)
      << open_error();
  with(classes, "\"targets\": true, \"classes\": 0");
  EXPECT_NE(open_error().find("its shards have no /labels"), std::string::npos) << open_error();
  write_text(index, good.substr(0, good.size() / 2));
  EXPECT_NE(open_error().find("not valid JSON"), std::string::npos) << open_error();
  fs::remove(index);
  EXPECT_NE(open_error().find("is a directory without an index.json"), std::string::npos) << open_error();

  // A shard replaced by another data set file: refused when first read, naming the shard.
  write_text(index, good);
  synth(dir, "other.h5", 20, io::SampleType::float32);
  fs::copy_file(dir.file("other.h5"), out + "/shard-00001.h5", fs::copy_options::overwrite_existing);
  const io::DatasetReader reader(out);
  std::vector<float> s;
  std::vector<std::int32_t> l;
  reader.read({0, 19}, s, l);  // shard 0 is intact
  const std::string why = error_of([&] { reader.read({25}, s, l); });
  EXPECT_NE(why.find("shard 1"), std::string::npos) << why;
  EXPECT_NE(why.find("does not match the index"), std::string::npos) << why;
  EXPECT_NE(why.find("float32 values"), std::string::npos) << why;
}
