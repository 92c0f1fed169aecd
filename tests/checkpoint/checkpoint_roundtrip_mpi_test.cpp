// Checkpoints written by P ranks and read back by Q ranks, for every P, Q up to the launcher's
// rank count: every tensor bit-identical (the values are random bit patterns, NaN payloads,
// denormals and -0 included, so any conversion or misplaced slice shows). Plus the checks a
// loader makes before trusting a manifest, the `latest` pointer, pruning and failed writes.

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "hpctrain/base/error.hpp"
#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/collectives/mpi_transport.hpp"
#include "hpctrain/io/checkpoint.hpp"

namespace fs = std::filesystem;
using namespace hpctrain;

namespace {

/// A fresh directory made by rank 0 of `comm` and known to all its ranks; removed at scope exit.
class SharedTempDir {
 public:
  explicit SharedTempDir(coll::Communicator& comm) : comm_(comm) {
    std::int64_t words[32] = {};  // 256 bytes of path
    if (comm.rank() == 0) {
      char tmpl[] = "/tmp/hpctrain-ckpt-test-XXXXXX";
      const char* made = mkdtemp(tmpl);
      HPCTRAIN_REQUIRE(made != nullptr, "mkdtemp failed");
      std::snprintf(reinterpret_cast<char*>(words), sizeof words, "%s", made);
    }
    comm.broadcast(words, 32, coll::DataType::i64, 0);
    path_ = reinterpret_cast<const char*>(words);
  }
  ~SharedTempDir() {
    comm_.barrier();
    if (comm_.rank() == 0) {
      std::error_code ec;
      fs::remove_all(path_, ec);
    }
  }
  const std::string& path() const { return path_; }

 private:
  coll::Communicator& comm_;
  std::string path_;
};

std::int64_t elements(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

/// Tensors of awkward shapes: empty ones, ones smaller than the rank count, odd sizes that
/// make shard boundaries fall inside tensors. Values are random 32-bit patterns (same on every
/// rank: the generator is seeded identically).
struct TensorSet {
  std::vector<std::string> names;
  std::vector<std::vector<std::int64_t>> shapes;
  std::vector<std::vector<float>> values;

  std::vector<io::CheckpointTensor> views() const {
    std::vector<io::CheckpointTensor> out;
    for (std::size_t i = 0; i < names.size(); ++i) out.push_back({names[i], shapes[i], values[i].data()});
    return out;
  }
};

TensorSet make_tensors(std::uint32_t seed) {
  TensorSet s;
  const std::vector<std::pair<std::string, std::vector<std::int64_t>>> spec = {
      {"params/0.dense.weight", {37, 11}},  {"params/0.dense.bias", {1}},
      {"params/1.empty", {3, 0, 5}},        {"params/2.pair", {2}},
      {"params/3.conv.weight", {6, 3, 3, 3}}, {"params/3.conv.bias", {6}},
      {"params/4.long", {1031, 17}},        {"params/5.three", {1, 1, 3}},
      {"optimizer/momentum/0.dense.weight", {37, 11}}, {"optimizer/momentum/4.long", {5}},
      {"zero", {0}},
  };
  std::mt19937 gen(seed);
  for (const auto& [name, shape] : spec) {
    s.names.push_back(name);
    s.shapes.push_back(shape);
    std::vector<float> v(static_cast<std::size_t>(elements(shape)));
    for (float& x : v) {
      const std::uint32_t bits = gen();
      std::memcpy(&x, &bits, sizeof x);
    }
    if (!v.empty()) {  // make sure the awkward values are there
      const std::uint32_t special[] = {0x80000000u, 0x7fc00001u, 0x00000001u, 0xff800000u, 0x7f7fffffu};
      for (std::size_t i = 0; i < std::size(special) && i < v.size(); ++i) std::memcpy(&v[i], &special[i], 4);
    }
    s.values.push_back(std::move(v));
  }
  return s;
}

/// Reads every tensor of `set` from `step_dir` into fresh buffers (filled with a sentinel) and
/// compares bit for bit; returns the number of mismatching elements.
std::int64_t read_and_compare(const std::string& step_dir, const TensorSet& set, std::string* first_bad) {
  std::vector<std::vector<float>> got;
  std::vector<io::CheckpointDestination> dests;
  for (std::size_t i = 0; i < set.names.size(); ++i) {
    std::vector<float> buf(set.values[i].size());
    const std::uint32_t sentinel = 0xdeadbeefu;
    for (float& x : buf) std::memcpy(&x, &sentinel, 4);
    got.push_back(std::move(buf));
  }
  for (std::size_t i = 0; i < set.names.size(); ++i) dests.push_back({set.names[i], set.shapes[i], got[i].data()});
  io::read_checkpoint_tensors(step_dir, dests);
  std::int64_t bad = 0;
  for (std::size_t i = 0; i < set.names.size(); ++i) {
    for (std::size_t k = 0; k < got[i].size(); ++k) {
      if (std::memcmp(&got[i][k], &set.values[i][k], 4) != 0) {
        if (bad++ == 0 && first_bad) *first_bad = set.names[i] + "[" + std::to_string(k) + "]";
      }
    }
  }
  return bad;
}

coll::Communicator world() { return coll::Communicator(coll::make_mpi_transport(MPI_COMM_WORLD)); }

TEST(CheckpointRoundTrip, EveryWriterCountLoadsAtEveryReaderCount) {
  coll::Communicator comm = world();
  const int W = comm.size();
  SharedTempDir tmp(comm);
  const TensorSet set = make_tensors(1234);
  std::int64_t total = 0;
  for (const auto& v : set.values) total += static_cast<std::int64_t>(v.size());

  for (int P = 1; P <= W; ++P) {
    coll::Communicator writers = comm.split(comm.rank() < P ? 0 : 1, comm.rank());
    const std::string dir = tmp.path() + "/P" + std::to_string(P);
    if (comm.rank() < P) {
      const nlohmann::json meta = {{"writers", P}};
      const auto r = io::write_checkpoint(writers, dir, /*step=*/P, meta, set.views(), /*keep=*/1);
      EXPECT_EQ(r.path, dir + "/step-" + std::to_string(P));
      EXPECT_GT(r.bytes, static_cast<std::uint64_t>(total) * 4);  // data + HDF5 metadata
    }
    comm.barrier();
    const std::string step_dir = dir + "/step-" + std::to_string(P);
    if (comm.rank() == 0) {
      // The manifest: P shards, each holding about 1/P of the elements.
      const auto m = io::read_manifest(step_dir);
      EXPECT_EQ(m.at("world_size").get<int>(), P);
      EXPECT_EQ(m.at("metadata").at("writers").get<int>(), P);
      std::vector<std::int64_t> per_shard(static_cast<std::size_t>(P), 0);
      for (const auto& t : m.at("tensors")) {
        for (const auto& p : t.at("pieces")) per_shard.at(p.at("shard").get<std::size_t>()) += p.at("count").get<std::int64_t>();
      }
      for (int r = 0; r < P; ++r) {
        EXPECT_LE(std::abs(per_shard[static_cast<std::size_t>(r)] - total / P), 1) << "shard " << r << " of " << P;
        EXPECT_TRUE(fs::exists(step_dir + "/" + m.at("shards").at(static_cast<std::size_t>(r)).at("file").get<std::string>()));
      }
      EXPECT_TRUE(io::verify_checkpoint(step_dir).empty());
      std::ifstream latest(dir + "/latest");
      std::string name;
      std::getline(latest, name);
      EXPECT_EQ(name, "step-" + std::to_string(P));
      EXPECT_FALSE(fs::exists(dir + "/.step-" + std::to_string(P) + ".tmp"));
    }
    for (int Q = 1; Q <= W; ++Q) {
      coll::Communicator readers = comm.split(comm.rank() < Q ? 0 : 1, comm.rank());
      if (comm.rank() < Q) {
        std::string first_bad;
        EXPECT_EQ(read_and_compare(step_dir, set, &first_bad), 0)
            << "written by " << P << " ranks, read by " << Q << " (rank " << comm.rank() << "); first: " << first_bad;
      }
      comm.barrier();
    }
  }
}

TEST(CheckpointRoundTrip, ReadRejectsWrongNameAndShape) {
  coll::Communicator comm = world();
  SharedTempDir tmp(comm);
  const TensorSet set = make_tensors(7);
  io::write_checkpoint(comm, tmp.path(), 3, {}, set.views(), 1);
  const std::string step_dir = tmp.path() + "/step-3";
  std::vector<float> buf(37 * 11);
  try {
    io::read_checkpoint_tensors(step_dir, {{"params/0.dense.weight", {11, 37}, buf.data()}});
    ADD_FAILURE() << "a shape mismatch was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[37,11]"), std::string::npos) << e.what();
  }
  try {
    io::read_checkpoint_tensors(step_dir, {{"params/nope", {1}, buf.data()}});
    ADD_FAILURE() << "a missing tensor was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("params/nope"), std::string::npos) << e.what();
  }
}

// ---- manifest checks: each tampering must be reported, naming manifest.json ------------------

/// Rank 0 alone: writes a one-shard checkpoint, applies `edit` to its manifest, returns the
/// problems verify_checkpoint reports.
std::vector<io::CheckpointProblem> tampered(coll::Communicator& self, const std::string& dir,
                                           const std::function<void(nlohmann::json&)>& edit) {
  const TensorSet set = make_tensors(99);
  io::write_checkpoint(self, dir, 1, {}, set.views(), 1);
  const std::string manifest = dir + "/step-1/manifest.json";
  nlohmann::json m;
  {
    std::ifstream in(manifest);
    m = nlohmann::json::parse(in);
  }
  EXPECT_TRUE(io::verify_checkpoint(dir + "/step-1").empty());
  edit(m);
  std::ofstream(manifest) << m.dump(1);
  return io::verify_checkpoint(dir + "/step-1");
}

void expect_rejected(coll::Communicator& self, const std::string& dir, const char* file, const char* what_part,
                     const std::function<void(nlohmann::json&)>& edit) {
  const auto problems = tampered(self, dir, edit);
  ASSERT_FALSE(problems.empty()) << "tampering not detected (" << what_part << ")";
  EXPECT_NE(problems[0].path.find(file), std::string::npos) << problems[0].path;
  EXPECT_NE(problems[0].what.find(what_part), std::string::npos) << problems[0].what;
  std::vector<io::CheckpointProblem> skipped;
  EXPECT_EQ(io::find_latest_checkpoint(dir, &skipped), "");
  EXPECT_FALSE(skipped.empty());
  fs::remove_all(dir);
}

TEST(CheckpointManifest, TamperingIsRejectedBeforeAnyRead) {
  coll::Communicator comm = world();
  SharedTempDir tmp(comm);
  coll::Communicator self = comm.split(comm.rank(), 0);  // every rank alone; rank 0 works
  if (comm.rank() == 0) {
    const std::string d = tmp.path() + "/m";
    const char* manifest = "manifest.json";
    const char* shard = "shard-00000-of-00001.h5";
    auto tensor = [](nlohmann::json& m, const std::string& name) -> nlohmann::json& {
      for (auto& t : m["tensors"])
        if (t["name"] == name) return t;
      throw std::runtime_error("no tensor " + name);
    };
    expect_rejected(self, d, manifest, "absurd shape", [&](nlohmann::json& m) { tensor(m, "params/4.long")["shape"] = {1LL << 40, 1LL << 40}; });
    expect_rejected(self, d, manifest, "absurd shape", [&](nlohmann::json& m) { tensor(m, "params/2.pair")["shape"] = {-2}; });
    expect_rejected(self, d, manifest, "outside", [&](nlohmann::json& m) { tensor(m, "params/4.long")["pieces"][0]["offset"] = 1LL << 62; });
    expect_rejected(self, d, manifest, "outside", [&](nlohmann::json& m) { tensor(m, "params/4.long")["pieces"][0]["count"] = -1; });
    expect_rejected(self, d, manifest, "outside", [&](nlohmann::json& m) { tensor(m, "params/4.long")["pieces"][0]["shard"] = 5; });
    expect_rejected(self, d, manifest, "tile", [&](nlohmann::json& m) {
      auto& t = tensor(m, "params/4.long");
      t["pieces"] = {{{"shard", 0}, {"offset", 0}, {"count", 10}}, {{"shard", 0}, {"offset", 5}, {"count", 1031 * 17 - 5}}};
    });
    expect_rejected(self, d, manifest, "cover", [&](nlohmann::json& m) { tensor(m, "params/4.long")["shape"] = {1031, 18}; });
    // A consistent-looking claim of 2^33 elements (32 GiB) in a small shard: the claimed bytes
    // exceed the shard's size, so it is rejected without allocating.
    expect_rejected(self, d, manifest, "bytes", [&](nlohmann::json& m) {
      auto& t = tensor(m, "params/4.long");
      t["shape"] = {1LL << 33};
      t["pieces"] = {{{"shard", 0}, {"offset", 0}, {"count", 1LL << 33}}};
    });
    expect_rejected(self, d, manifest, "not a plain file name", [&](nlohmann::json& m) { m["shards"][0]["file"] = "../../etc/passwd"; });
    expect_rejected(self, d, manifest, "world_size", [&](nlohmann::json& m) { m["world_size"] = 2; });
    expect_rejected(self, d, manifest, "format_version", [&](nlohmann::json& m) { m["format_version"] = 99; });
    expect_rejected(self, d, manifest, "malformed", [&](nlohmann::json& m) { m["tensors"][0]["shape"] = "big"; });
    expect_rejected(self, d, shard, "size", [&](nlohmann::json& m) { m["shards"][0]["bytes"] = m["shards"][0]["bytes"].get<std::int64_t>() + 1; });
    expect_rejected(self, d, shard, "checksum", [&](nlohmann::json& m) { m["shards"][0]["xxh3"] = "0123456789abcdef"; });
    // Format 2: the manifest's own checksum sees a change nothing else would (a resume point).
    expect_rejected(self, d, manifest, "manifest checksum mismatch", [&](nlohmann::json& m) { m["metadata"]["next_batch"] = 38; });
    expect_rejected(self, d, manifest, "no manifest_xxh3 field", [&](nlohmann::json& m) { m.erase("manifest_xxh3"); });
  }
  comm.barrier();
}

TEST(CheckpointManifest, Version1WithoutChecksumVerifiesWithAWarning) {
  coll::Communicator comm = world();
  SharedTempDir tmp(comm);
  coll::Communicator self = comm.split(comm.rank(), 0);
  if (comm.rank() == 0) {
    const std::string d = tmp.path() + "/v1";
    const auto problems = tampered(self, d, [](nlohmann::json& m) {
      m["format_version"] = 1;
      m.erase("manifest_xxh3");
    });
    EXPECT_TRUE(problems.empty()) << problems[0].what;
    const std::string warning = io::manifest_warning(io::read_manifest(d + "/step-1"));
    EXPECT_NE(warning.find("format_version 1 manifest has no checksum of its own"), std::string::npos) << warning;
    const std::string none = (io::write_checkpoint(self, d, 2, {}, make_tensors(7).views(), 3), io::manifest_warning(io::read_manifest(d + "/step-2")));
    EXPECT_EQ(none, "");
  }
  comm.barrier();
}

// ---- latest, pruning, re-writing a step, failed writes --------------------------------------

TEST(CheckpointDirectory, LatestIsConsultedFirstAndGarbageIsSkipped) {
  coll::Communicator comm = world();
  SharedTempDir tmp(comm);
  const TensorSet set = make_tensors(5);
  for (std::int64_t step : {10, 20, 30}) io::write_checkpoint(comm, tmp.path(), step, {}, set.views(), 5);
  if (comm.rank() == 0) {
    std::vector<io::CheckpointProblem> skipped;
    EXPECT_EQ(io::find_latest_checkpoint(tmp.path(), &skipped), tmp.path() + "/step-30");
    EXPECT_TRUE(skipped.empty());
    // A run resumed from step-20 by path: its `latest` wins over the abandoned step-30.
    std::ofstream(tmp.path() + "/latest") << "step-20\n";
    EXPECT_EQ(io::find_latest_checkpoint(tmp.path(), &skipped), tmp.path() + "/step-20");
    // Garbage in `latest`: reported (naming the file) and ignored; the newest valid step wins.
    std::ofstream(tmp.path() + "/latest", std::ios::binary) << std::string("\x01\xff../../etc\0zz", 14);
    skipped.clear();
    EXPECT_EQ(io::find_latest_checkpoint(tmp.path(), &skipped), tmp.path() + "/step-30");
    ASSERT_EQ(skipped.size(), 1u);
    EXPECT_NE(skipped[0].path.find("latest"), std::string::npos);
    // `latest` names a damaged step: reported, and the newest valid one is used.
    std::ofstream(tmp.path() + "/latest") << "step-30\n";
    fs::remove(tmp.path() + "/step-30/manifest.json");
    skipped.clear();
    EXPECT_EQ(io::find_latest_checkpoint(tmp.path(), &skipped), tmp.path() + "/step-20");
    ASSERT_FALSE(skipped.empty());
    EXPECT_NE(skipped[0].path.find("step-30/manifest.json"), std::string::npos) << skipped[0].path;
  }
  comm.barrier();
}

TEST(CheckpointDirectory, KeepPrunesOldStepsAndTemporaries) {
  coll::Communicator comm = world();
  SharedTempDir tmp(comm);
  const TensorSet set = make_tensors(6);
  if (comm.rank() == 0) fs::create_directories(tmp.path() + "/.step-7.tmp");  // a crashed write's leftovers
  comm.barrier();
  for (std::int64_t step = 1; step <= 4; ++step) io::write_checkpoint(comm, tmp.path(), step, {}, set.views(), 2);
  // Writing the same step again (a resumed run reaching it) replaces it atomically.
  io::write_checkpoint(comm, tmp.path(), 4, {{"again", true}}, set.views(), 2);
  if (comm.rank() == 0) {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(tmp.path())) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    EXPECT_EQ(names, (std::vector<std::string>{"latest", "step-3", "step-4"}));
    EXPECT_TRUE(io::read_manifest(tmp.path() + "/step-4").at("metadata").at("again").get<bool>());
    EXPECT_TRUE(io::verify_checkpoint(tmp.path() + "/step-4").empty());
  }
  comm.barrier();
}

TEST(CheckpointDirectory, UnwritableDirectoryFailsOnEveryRankNamingIt) {
  coll::Communicator comm = world();
  SharedTempDir tmp(comm);
  if (comm.rank() == 0) std::ofstream(tmp.path() + "/a-file") << "x";
  comm.barrier();
  const TensorSet set = make_tensors(8);
  try {
    io::write_checkpoint(comm, tmp.path() + "/a-file/ckpt", 1, {}, set.views(), 1);
    ADD_FAILURE() << "writing under a regular file succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a-file/ckpt"), std::string::npos) << e.what();
  }
  try {
    io::write_checkpoint(comm, tmp.path(), 1, {}, set.views(), 0);
    ADD_FAILURE() << "keep 0 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--keep"), std::string::npos) << e.what();
  }
}

}  // namespace
