#include "hpctrain/io/checkpoint.hpp"

#include "hpctrain/collectives/string_collectives.hpp"

#include <hdf5.h>
#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "hpctrain/base/error.hpp"
#include "hpctrain/io/durable_file.hpp"
#include "hpctrain/io/h5.hpp"
#include "checkpoint_shard.hpp"

namespace hpctrain::io {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "hpctrain-checkpoint";
// 2: the manifest records the checksum of its own content (kManifestChecksumKey). Version 1
// manifests (none) still verify and resume, with a warning that they are unprotected.
constexpr std::int64_t kFormatVersion = 2;
constexpr std::int64_t kFirstProtectedVersion = 2;
constexpr const char* kManifestChecksumKey = "manifest_xxh3";
// A manifest takes ~100 bytes per tensor piece; 256 MiB is millions of tensors, and bounds what
// parsing a hostile or garbage file can allocate.
constexpr std::uintmax_t kMaxManifestBytes = std::uintmax_t{256} << 20;

std::string step_name(std::int64_t step) { return "step-" + std::to_string(step); }
std::string shard_name(int rank, int world) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "shard-%05d-of-%05d.h5", rank, world);
  return buf;
}
std::string hex64(std::uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::int64_t product(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

/// Step number of a directory name "step-<N>", or -1.
std::int64_t parse_step(const std::string& name) {
  // At most 18 digits, so the value cannot overflow int64.
  if (name.rfind("step-", 0) != 0 || name.size() <= 5 || name.size() > 23) return -1;
  std::int64_t n = 0;
  for (std::size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    n = n * 10 + (name[i] - '0');
  }
  return n;
}

/// Test hook: HPCTRAIN_FAULT_KILL_DURING_CHECKPOINT="<rank>:<step>" makes that rank SIGKILL
/// itself after writing the first piece of its shard at that step (a crash mid-write).
void maybe_crash(int rank, std::int64_t step) {
  const char* spec = std::getenv("HPCTRAIN_FAULT_KILL_DURING_CHECKPOINT");
  if (!spec) return;
  int r = -1;
  long long s = -1;
  if (std::sscanf(spec, "%d:%lld", &r, &s) == 2 && r == rank && s == step) std::raise(SIGKILL);
}

/// XXH3-64 of the manifest without its checksum field, as compact JSON with sorted keys
/// (nlohmann's object order): the same bytes on every reader, whatever the file's layout.
std::string manifest_checksum(nlohmann::json m) {
  m.erase(kManifestChecksumKey);
  const std::string canonical = m.dump();
  return hex64(XXH3_64bits(canonical.data(), canonical.size()));
}

/// Collective agreement: every rank passes its error text ("" = fine); when any failed, throws
/// with all failing ranks' messages (whole, however long): rank 0 an Error, the others a
/// PeerReportedError, so the combined message is printed once.
void agree(coll::Communicator& comm, const std::string& my_error, const std::string& what) {
  std::string text = my_error;
  std::replace(text.begin(), text.end(), '\n', ' ');  // HDF5's messages hold newlines: one line
  const std::vector<std::string> all = coll::allgather_strings(comm, text);
  std::string combined;
  for (std::size_t r = 0; r < all.size(); ++r) {
    if (all[r].empty()) continue;
    combined += (combined.empty() ? "" : "; ") + ("rank " + std::to_string(r) + ": " + all[r]);
  }
  if (combined.empty()) return;
  if (comm.rank() == 0) HPCTRAIN_FAIL(what + " failed: " + combined);
  throw PeerReportedError(what + " failed: " + combined, __FILE__, __LINE__);
}

/// A piece of the concatenation of all tensors, [begin, end), mapped to tensor slices.
struct Piece {
  std::size_t tensor;
  std::int64_t offset, count;  // within the tensor
};
std::vector<Piece> pieces_of(const std::vector<CheckpointTensor>& tensors, std::int64_t begin, std::int64_t end) {
  std::vector<Piece> out;
  std::int64_t base = 0;
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    const std::int64_t n = product(tensors[t].shape);
    const std::int64_t lo = std::max(begin, base), hi = std::min(end, base + n);
    if (lo < hi) out.push_back({t, lo - base, hi - lo});
    base += n;
  }
  return out;
}

/// This rank's pieces: its even share of the replicated tensors' concatenation, then its
/// slices of the sharded ones.
std::vector<detail::ShardPiece> rank_pieces(const std::vector<CheckpointTensor>& replicated,
                                            const std::vector<CheckpointSlice>& sharded, std::int64_t begin,
                                            std::int64_t end) {
  std::vector<detail::ShardPiece> out;
  for (const Piece& p : pieces_of(replicated, begin, end)) {
    const CheckpointTensor& t = replicated[p.tensor];
    out.push_back({&t.name, &t.shape, p.offset, p.count, t.data + p.offset});
  }
  for (const CheckpointSlice& s : sharded) {
    if (s.count > 0) out.push_back({&s.name, &s.shape, s.offset, s.count, s.data});
  }
  return out;
}

/// Every rank's (offset, count) of each sharded tensor, rank-major; checks they tile each
/// tensor (collective; throws the same message on every rank).
std::vector<std::int64_t> gather_slices(coll::Communicator& comm, const std::vector<CheckpointSlice>& sharded) {
  const std::size_t n = sharded.size(), world = static_cast<std::size_t>(comm.size());
  std::int64_t count = static_cast<std::int64_t>(n), lo = count, hi = count;
  comm.allreduce(&lo, 1, coll::ReduceOp::min);
  comm.allreduce(&hi, 1, coll::ReduceOp::max);
  HPCTRAIN_REQUIRE(lo == hi, "checkpoint: ranks pass different numbers of sharded tensors (" + std::to_string(lo) +
                                 ".." + std::to_string(hi) + ")");
  std::vector<std::int64_t> mine(2 * n), all(2 * n * world);
  for (std::size_t j = 0; j < n; ++j) {
    mine[2 * j] = sharded[j].offset;
    mine[2 * j + 1] = sharded[j].count;
  }
  comm.allgather(mine.data(), all.data(), 2 * n, coll::DataType::i64);
  for (std::size_t j = 0; j < n; ++j) {
    std::vector<std::pair<std::int64_t, std::int64_t>> spans;
    for (std::size_t r = 0; r < world; ++r) {
      if (all[(r * n + j) * 2 + 1] > 0) spans.emplace_back(all[(r * n + j) * 2], all[(r * n + j) * 2 + 1]);
    }
    std::sort(spans.begin(), spans.end());
    std::int64_t next = 0;
    for (const auto& [off, cnt] : spans) {
      HPCTRAIN_REQUIRE(off == next, "checkpoint: the ranks' slices of sharded tensor '" + sharded[j].name +
                                        "' do not tile it (a gap or an overlap at element " + std::to_string(next) + ")");
      next = off + cnt;
    }
    HPCTRAIN_REQUIRE(next == product(sharded[j].shape), "checkpoint: the ranks' slices of sharded tensor '" +
                                                            sharded[j].name + "' cover " + std::to_string(next) +
                                                            " of its " + std::to_string(product(sharded[j].shape)) +
                                                            " elements");
  }
  return all;
}

void prune(const fs::path& dir, std::int64_t newest, int keep) {
  std::vector<std::int64_t> steps;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (e.is_directory() && parse_step(name) >= 0) steps.push_back(parse_step(name));
    // Temporaries of crashed or failed writes (the current one was renamed already).
    if (e.is_directory() && name.rfind(".step-", 0) == 0) fs::remove_all(e.path());
  }
  std::sort(steps.rbegin(), steps.rend());
  int kept = 0;
  for (std::int64_t s : steps) {
    if (s == newest || kept < keep) {
      ++kept;
      continue;
    }
    fs::remove_all(dir / step_name(s));
  }
}

/// Where one checkpoint is written and committed, and the prefix of every agreed error.
struct StepPaths {
  fs::path root, tmp, final_dir;
  std::string what;
};

StepPaths step_paths(const std::string& dir, std::int64_t step) {
  const fs::path root(dir);
  return {root, root / (".step-" + std::to_string(step) + ".tmp"), root / step_name(step),
          "checkpoint " + step_name(step) + " in '" + dir + "'"};
}

/// Rank 0 creates an empty temporary step directory; every rank learns whether it could.
void create_temporary(coll::Communicator& comm, const StepPaths& at) {
  std::string error;
  if (comm.rank() == 0) {
    try {
      fs::create_directories(at.root);
      fs::remove_all(at.tmp);
      fs::create_directory(at.tmp);
    } catch (const std::exception& e) {
      error = "cannot create '" + at.tmp.string() + "': " + e.what();
    }
  }
  agree(comm, error, at.what);
}

/// Every rank writes its shard into the temporary directory (fsynced, checksummed while
/// written) and the ranks agree that all succeeded; on a failure rank 0 removes the temporary
/// and every rank throws. Returns every rank's (bytes, xxh3), rank-major.
std::vector<std::int64_t> write_shards(coll::Communicator& comm, const StepPaths& at, std::int64_t step,
                                       const std::vector<detail::ShardPiece>& pieces) {
  const int rank = comm.rank(), world = comm.size();
  std::string error;
  std::int64_t digest[2] = {0, 0};
  try {
    const FileDigest d = detail::write_shard_file((at.tmp / shard_name(rank, world)).string(), pieces,
                                                  [&] { maybe_crash(rank, step); });
    digest[0] = static_cast<std::int64_t>(d.bytes);
    digest[1] = static_cast<std::int64_t>(d.xxh3);
  } catch (const Error& e) {
    error = e.reason();  // agree() adds the rank; the source location is of no use to a user
  } catch (const std::exception& e) {
    error = e.what();
  }
  try {
    agree(comm, error, at.what);
  } catch (...) {
    if (rank == 0) {
      std::error_code ec;
      fs::remove_all(at.tmp, ec);  // the previous checkpoint is untouched
    }
    throw;
  }
  std::vector<std::int64_t> digests(2 * static_cast<std::size_t>(world));
  comm.allgather(digest, digests.data(), 2, coll::DataType::i64);
  return digests;
}

/// The manifest of a checkpoint written by `world` ranks: every shard's size and checksum
/// (`digests`, from write_shards), every tensor's pieces (the replicated ones split evenly,
/// the sharded ones from `slices`, gather_slices' layout), and its own checksum.
nlohmann::json build_manifest(std::int64_t step, int world, const nlohmann::json& metadata,
                              const std::vector<CheckpointTensor>& tensors,
                              const std::vector<CheckpointSlice>& sharded, const std::vector<std::int64_t>& slices,
                              const std::vector<std::int64_t>& digests) {
  nlohmann::json m;
  m["format"] = kFormat;
  m["format_version"] = kFormatVersion;
  m["hpctrain_version"] = "0.1.0";
  m["step"] = step;
  m["world_size"] = world;
  m["metadata"] = metadata;
  nlohmann::json shards = nlohmann::json::array();
  for (int r = 0; r < world; ++r) {
    const auto at = 2 * static_cast<std::size_t>(r);
    shards.push_back({{"file", shard_name(r, world)},
                      {"bytes", digests[at]},
                      {"xxh3", hex64(static_cast<std::uint64_t>(digests[at + 1]))}});
  }
  m["shards"] = shards;
  std::int64_t total = 0;
  for (const auto& t : tensors) total += product(t.shape);
  nlohmann::json list = nlohmann::json::array();
  std::vector<nlohmann::json> piece_lists(tensors.size(), nlohmann::json::array());
  for (int r = 0; r < world; ++r) {
    for (const Piece& p : pieces_of(tensors, total * r / world, total * (r + 1) / world)) {
      piece_lists[p.tensor].push_back({{"shard", r}, {"offset", p.offset}, {"count", p.count}});
    }
  }
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    list.push_back({{"name", tensors[t].name}, {"shape", tensors[t].shape}, {"dtype", "f32"},
                    {"pieces", piece_lists[t]}});
  }
  for (std::size_t j = 0; j < sharded.size(); ++j) {
    nlohmann::json pieces = nlohmann::json::array();
    for (int r = 0; r < world; ++r) {
      const std::size_t at = (static_cast<std::size_t>(r) * sharded.size() + j) * 2;
      if (slices[at + 1] > 0) pieces.push_back({{"shard", r}, {"offset", slices[at]}, {"count", slices[at + 1]}});
    }
    list.push_back({{"name", sharded[j].name}, {"shape", sharded[j].shape}, {"dtype", "f32"}, {"pieces", pieces}});
  }
  m["tensors"] = list;
  m[kManifestChecksumKey] = manifest_checksum(m);
  return m;
}

/// Rank 0's commit: the manifest into the temporary directory, the directory renamed into
/// place (an existing step set aside first, see recover_interrupted_rewrites), `latest`, and
/// old steps pruned. Throws on failure.
void commit_step(const StepPaths& at, std::int64_t step, int keep, const nlohmann::json& manifest) {
  atomic_write_file((at.tmp / "manifest.json").string(), manifest.dump(1) + "\n");  // fsyncs tmp too
  if (fs::exists(at.final_dir)) {  // the same step written again (e.g. after a resume)
    const fs::path old = at.root / (".step-" + std::to_string(step) + ".old");
    fs::remove_all(old);
    fs::rename(at.final_dir, old);
    fs::rename(at.tmp, at.final_dir);
    fs::remove_all(old);
  } else {
    fs::rename(at.tmp, at.final_dir);
  }
  // One fsync of `dir` (inside atomic_write_file) makes both renames durable. Should a
  // crash keep the new `latest` but lose the directory rename, `latest` names a missing
  // directory, which find_latest_checkpoint reports and skips for the previous step.
  atomic_write_file((at.root / "latest").string(), step_name(step) + "\n");
  prune(at.root, step, keep);
}

}  // namespace

CommitResult write_checkpoint(coll::Communicator& comm, const std::string& dir, std::int64_t step,
                              const nlohmann::json& metadata, const std::vector<CheckpointTensor>& tensors,
                              int keep) {
  return write_checkpoint(comm, dir, step, metadata, tensors, {}, keep);
}

CommitResult write_checkpoint(coll::Communicator& comm, const std::string& dir, std::int64_t step,
                              const nlohmann::json& metadata, const std::vector<CheckpointTensor>& tensors,
                              const std::vector<CheckpointSlice>& sharded, int keep) {
  HPCTRAIN_REQUIRE(keep >= 1, "--keep must be at least 1, got " + std::to_string(keep));
  HPCTRAIN_REQUIRE(step >= 0, "checkpoint step must be non-negative");
  const auto start = std::chrono::steady_clock::now();
  const int rank = comm.rank(), world = comm.size();
  const StepPaths at = step_paths(dir, step);
  create_temporary(comm, at);

  const std::vector<std::int64_t> slices = gather_slices(comm, sharded);
  std::int64_t total = 0;
  for (const auto& t : tensors) total += product(t.shape);
  const std::vector<std::int64_t> digests =
      write_shards(comm, at, step, rank_pieces(tensors, sharded, total * rank / world, total * (rank + 1) / world));

  std::uint64_t bytes = 0;
  for (int r = 0; r < world; ++r) bytes += static_cast<std::uint64_t>(digests[2 * static_cast<std::size_t>(r)]);
  std::string error;
  if (rank == 0) {
    try {
      commit_step(at, step, keep, build_manifest(step, world, metadata, tensors, sharded, slices, digests));
    } catch (const std::exception& e) {
      error = std::string("commit: ") + e.what();
    }
  }
  agree(comm, error, at.what);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  comm.allreduce(&seconds, 1, coll::ReduceOp::max);
  return CommitResult{at.final_dir.string(), bytes, seconds};
}

std::vector<std::string> recover_interrupted_rewrites(const std::string& dir) {
  std::vector<std::string> recovered;
  const fs::path root(dir);
  if (!fs::is_directory(root)) return recovered;
  for (const auto& e : fs::directory_iterator(root)) {
    const std::string name = e.path().filename().string();
    const std::string suffix = ".old";
    if (!e.is_directory() || name.size() <= suffix.size() + 1 || name[0] != '.' ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    const std::string step = name.substr(1, name.size() - 1 - suffix.size());
    if (parse_step(step) < 0 || fs::exists(root / step)) continue;
    // Set aside by a re-write of the same step that crashed before its new version was renamed
    // in: the old version is complete (it was committed), so it is the step.
    fs::rename(e.path(), root / step);
    recovered.push_back((root / step).string());
  }
  if (!recovered.empty()) fsync_path(root.string(), true, false);
  return recovered;
}

std::string manifest_warning(const nlohmann::json& manifest) {
  const auto version = manifest.value("format_version", nlohmann::json());
  if (version.is_number_integer() && version.get<std::int64_t>() < kFirstProtectedVersion) {
    return "format_version " + version.dump() + " manifest has no checksum of its own: damage to it (e.g. a "
           "changed next_batch) cannot be detected";
  }
  return "";
}

nlohmann::json read_manifest(const std::string& step_dir) {
  const std::string path = (fs::path(step_dir) / "manifest.json").string();
  std::ifstream in(path);
  HPCTRAIN_REQUIRE(in.good(), "checkpoint manifest '" + path + "' is missing or unreadable");
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  HPCTRAIN_REQUIRE(!ec && size <= kMaxManifestBytes,
                   "checkpoint manifest '" + path + "' is " + (ec ? "not a regular file" : "larger than " +
                   std::to_string(kMaxManifestBytes >> 20) + " MiB") + ": not a manifest");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    HPCTRAIN_FAIL("checkpoint manifest '" + path + "' is not valid JSON: " + e.what());
  }
}

namespace {

/// `key` of `j` as an integer. nlohmann's get<std::int64_t>() of a float outside int64's range
/// is undefined behaviour (fuzz.manifest found `"bytes": 1.7e84`), so anything but an integer is
/// refused first.
std::int64_t manifest_integer(const nlohmann::json& j, const char* key) {
  const auto& v = j.at(key);
  HPCTRAIN_REQUIRE(v.is_number_integer(), std::string("malformed manifest: '") + key + "' is " + v.dump() +
                                              ", not an integer");
  return v.get<std::int64_t>();
}

/// `key` of `j` as a list of integers (manifest_integer's rule for each).
std::vector<std::int64_t> manifest_integers(const nlohmann::json& j, const char* key) {
  const auto& v = j.at(key);
  HPCTRAIN_REQUIRE(v.is_array(), std::string("malformed manifest: '") + key + "' is " + v.dump() + ", not a list");
  std::vector<std::int64_t> out;
  for (const auto& e : v) {
    HPCTRAIN_REQUIRE(e.is_number_integer(), std::string("malformed manifest: '") + key + "' holds " + e.dump() +
                                                ", not an integer");
    out.push_back(e.get<std::int64_t>());
  }
  return out;
}

/// The problems verify_checkpoint collects, with the manifest's path for the manifest's own.
struct ProblemList {
  std::vector<CheckpointProblem>& problems;
  const std::string& manifest_path;
  void manifest(const std::string& what) const { problems.push_back({manifest_path, what}); }
  void file(const std::string& path, const std::string& what) const { problems.push_back({path, what}); }
};

/// format, format_version and world_size against the shard list; false ends the verification.
bool verify_manifest_header(const nlohmann::json& m, const ProblemList& report) {
  if (m.value("format", std::string()) != kFormat) {
    report.manifest("not an hpctrain checkpoint manifest (format field)");
    return false;
  }
  const auto version = m.value("format_version", nlohmann::json());
  if (!version.is_number_integer() || version.get<std::int64_t>() < 1 ||
      version.get<std::int64_t>() > kFormatVersion) {
    report.manifest("unsupported format_version " + version.dump());
    return false;
  }
  const auto& shards = m.at("shards");
  const std::int64_t world = manifest_integer(m, "world_size");
  if (!shards.is_array() || world < 1 || static_cast<std::int64_t>(shards.size()) != world || world > (1 << 24)) {
    report.manifest("world_size and shard list disagree");
    return false;
  }
  return true;
}

/// Every tensor's shape is sane and its pieces tile it exactly. Fills `claimed` (elements each
/// shard's pieces claim: checked against the shard's byte size later, so a manifest cannot make
/// a reader allocate more than the files on disk hold). False ends the verification.
bool verify_tensor_layout(const nlohmann::json& m, std::int64_t max_elements, const ProblemList& report,
                          std::vector<std::int64_t>& claimed) {
  const std::int64_t world = manifest_integer(m, "world_size");
  claimed.assign(static_cast<std::size_t>(world), 0);
  std::int64_t total = 0;
  for (const auto& t : m.at("tensors")) {
    const std::string name = t.at("name").get<std::string>();
    const auto shape = manifest_integers(t, "shape");
    std::int64_t n = 1;
    for (auto d : shape) {
      if (d < 0 || d > max_elements || (d > 0 && n > max_elements / d)) {
        report.manifest("tensor '" + name + "' claims an absurd shape");
        return false;
      }
      n *= d;
    }
    total += n;
    if (total > max_elements) {
      report.manifest("tensors claim more than " + std::to_string(max_elements) + " elements");
      return false;
    }
    std::vector<std::pair<std::int64_t, std::int64_t>> ranges;
    for (const auto& p : t.at("pieces")) {
      const auto shard = manifest_integer(p, "shard"), off = manifest_integer(p, "offset"),
                 cnt = manifest_integer(p, "count");
      if (shard < 0 || shard >= world || off < 0 || cnt < 0 || off > n || cnt > n - off) {
        report.manifest("tensor '" + name + "' has a piece outside its shape or shard list");
        return false;
      }
      ranges.emplace_back(off, cnt);
      claimed[static_cast<std::size_t>(shard)] += cnt;  // <= total <= max_elements: no overflow
    }
    std::sort(ranges.begin(), ranges.end());
    std::int64_t covered = 0;
    for (auto [off, cnt] : ranges) {
      if (off != covered) {
        report.manifest("tensor '" + name + "' pieces do not tile it");
        return false;
      }
      covered += cnt;
    }
    if (covered != n) {
      report.manifest("tensor '" + name + "' pieces do not cover it");
      return false;
    }
  }
  return true;
}

/// Each shard file: a plain name, present, large enough for its pieces, the recorded size and
/// checksum. Every shard is checked (problems accumulate).
void verify_shard_files(const nlohmann::json& m, const fs::path& dir, const std::vector<std::int64_t>& claimed,
                        const ProblemList& report) {
  const auto& shards = m.at("shards");
  for (std::size_t r = 0; r < shards.size(); ++r) {
    const auto& s = shards[r];
    const std::string file = s.at("file").get<std::string>();
    if (file.empty() || file.find('/') != std::string::npos || file.find("..") != std::string::npos) {
      report.manifest("shard file name '" + file + "' is not a plain file name");
      continue;
    }
    const std::string path = (dir / file).string();
    if (!fs::exists(path)) {
      report.file(path, "shard missing");
      continue;
    }
    const auto& bytes = s.at("bytes");
    if (!bytes.is_number_unsigned()) {  // get<uint64_t> of a float is undefined, of a negative value wraps
      report.manifest("shard '" + file + "' has bytes " + bytes.dump() + ", not a non-negative integer");
      continue;
    }
    const auto want_bytes = bytes.get<std::uint64_t>();
    // Pieces are stored uncompressed as float32: a shard cannot hold more than bytes / 4.
    if (static_cast<std::uint64_t>(claimed[r]) > want_bytes / sizeof(float)) {
      report.manifest("tensor pieces in shard '" + file + "' claim " + std::to_string(claimed[r] * 4) +
                      " bytes of data, more than its recorded size of " + std::to_string(want_bytes) + " bytes");
      continue;
    }
    const auto size = static_cast<std::uint64_t>(fs::file_size(path));
    if (size != want_bytes) {
      report.file(path, "size " + std::to_string(size) + " bytes, manifest says " + std::to_string(want_bytes) +
                            " (truncated or torn)");
      continue;
    }
    const FileDigest d = digest_file(path);
    if (hex64(d.xxh3) != s.at("xxh3").get<std::string>()) {
      report.file(path, "checksum mismatch (xxh3 " + hex64(d.xxh3) + ", manifest says " +
                            s.at("xxh3").get<std::string>() + "): data corrupted");
    }
  }
}

/// The manifest's own checksum (format_version >= kFirstProtectedVersion).
void verify_manifest_checksum(const nlohmann::json& m, const ProblemList& report) {
  const auto version = m.at("format_version");
  if (version.get<std::int64_t>() < kFirstProtectedVersion) return;
  const auto recorded = m.value(kManifestChecksumKey, nlohmann::json());
  const std::string actual = manifest_checksum(m);
  if (!recorded.is_string()) {
    report.manifest(std::string("no ") + kManifestChecksumKey + " field (format_version " + version.dump() +
                    " records one): manifest damaged");
  } else if (recorded.get<std::string>() != actual) {
    report.manifest("manifest checksum mismatch (xxh3 " + actual + ", manifest says " + recorded.get<std::string>() +
                    "): manifest modified or damaged");
  }
}

}  // namespace

std::vector<CheckpointProblem> verify_checkpoint(const std::string& step_dir, std::int64_t max_elements) {
  std::vector<CheckpointProblem> problems;
  const fs::path dir(step_dir);
  const std::string manifest_path = (dir / "manifest.json").string();
  const ProblemList report{problems, manifest_path};
  nlohmann::json m;
  try {
    m = read_manifest(step_dir);
  } catch (const std::exception& e) {
    report.manifest(e.what());
    return problems;
  }
  try {
    std::vector<std::int64_t> claimed;
    if (!verify_manifest_header(m, report) || !verify_tensor_layout(m, max_elements, report, claimed)) return problems;
    verify_shard_files(m, dir, claimed, report);
    // Last: a hostile manifest is first checked for what it could make a reader do (above);
    // one that is well-formed must also be the one the writer wrote.
    verify_manifest_checksum(m, report);
  } catch (const nlohmann::json::exception& e) {
    report.manifest(std::string("malformed manifest: ") + e.what());
  } catch (const std::exception& e) {
    report.manifest(e.what());
  }
  return problems;
}

std::string find_latest_checkpoint(const std::string& dir, std::vector<CheckpointProblem>* skipped) {
  const fs::path root(dir);
  if (!fs::is_directory(root)) return "";
  // `latest` first: it names the step the run last committed, which is not always the newest
  // directory (a run resumed by path from an older step leaves newer, abandoned steps behind).
  const fs::path latest = root / "latest";
  std::int64_t named = -1;
  if (fs::exists(latest)) {
    std::ifstream in(latest);
    std::string target;
    std::getline(in, target);
    named = parse_step(target);
    if (named < 0 || step_name(named) != target || !fs::is_directory(root / target)) {
      std::string shown;
      for (char c : target.substr(0, 64)) shown += (c >= 0x20 && c < 0x7f) ? c : '?';
      if (skipped) skipped->push_back({latest.string(), "points at '" + shown +
                                                            "', which is not a step directory; ignored"});
      named = -1;
    } else {
      const std::string path = (root / step_name(named)).string();
      auto problems = verify_checkpoint(path);
      if (problems.empty()) return path;
      if (skipped) skipped->insert(skipped->end(), problems.begin(), problems.end());
    }
  }
  std::vector<std::int64_t> steps;
  for (const auto& e : fs::directory_iterator(root)) {
    const std::int64_t s = parse_step(e.path().filename().string());
    if (e.is_directory() && s >= 0 && s != named) steps.push_back(s);
  }
  std::sort(steps.rbegin(), steps.rend());
  for (std::int64_t s : steps) {
    const std::string path = (root / step_name(s)).string();
    auto problems = verify_checkpoint(path);
    if (problems.empty()) return path;
    if (skipped) skipped->insert(skipped->end(), problems.begin(), problems.end());
  }
  return "";
}

std::vector<std::pair<std::string, std::vector<std::int64_t>>> checkpoint_tensor_list(const nlohmann::json& m) {
  std::vector<std::pair<std::string, std::vector<std::int64_t>>> out;
  for (const auto& t : m.at("tensors")) {
    out.emplace_back(t.at("name").get<std::string>(), t.at("shape").get<std::vector<std::int64_t>>());
  }
  return out;
}

void read_checkpoint_tensors(const std::string& step_dir, const std::vector<CheckpointDestination>& tensors) {
  const nlohmann::json m = read_manifest(step_dir);
  std::map<std::string, const nlohmann::json*> by_name;
  for (const auto& t : m.at("tensors")) by_name[t.at("name").get<std::string>()] = &t;
  const auto& shards = m.at("shards");
  H5Lock lock;
  std::map<std::int64_t, H5File> open;
  for (const CheckpointDestination& dest : tensors) {
    const auto it = by_name.find(dest.name);
    HPCTRAIN_REQUIRE(it != by_name.end(), "checkpoint '" + step_dir + "' has no tensor '" + dest.name +
                                              "' (was it written by a different model?)");
    const auto shape = it->second->at("shape").get<std::vector<std::int64_t>>();
    HPCTRAIN_REQUIRE(shape == dest.shape, "checkpoint '" + step_dir + "': tensor '" + dest.name + "' has shape " +
                                              nlohmann::json(shape).dump() + ", the model expects " +
                                              nlohmann::json(dest.shape).dump());
    for (const auto& p : it->second->at("pieces")) {
      const auto shard = p.at("shard").get<std::int64_t>(), off = p.at("offset").get<std::int64_t>(),
                 cnt = p.at("count").get<std::int64_t>();
      HPCTRAIN_REQUIRE(shard >= 0 && shard < static_cast<std::int64_t>(shards.size()) && off >= 0 && cnt >= 0 &&
                           off + cnt <= product(shape),
                       "checkpoint '" + step_dir + "': tensor '" + dest.name + "' has an invalid piece");
      const std::string path = (fs::path(step_dir) / shards.at(static_cast<std::size_t>(shard)).at("file").get<std::string>()).string();
      auto f = open.find(shard);
      if (f == open.end()) {
        f = open.emplace(shard, H5File(HPCTRAIN_CHECK_H5(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT),
                                                         "checkpoint shard '" + path + "': open"))).first;
      }
      const std::string where = "checkpoint shard '" + path + "' dataset '/" + dest.name + "'";
      H5Dataset ds(HPCTRAIN_CHECK_H5(H5Dopen2(f->second.get(), ("/" + dest.name).c_str(), H5P_DEFAULT), where + ": open"));
      H5Dataspace space(HPCTRAIN_CHECK_H5(H5Dget_space(ds.get()), where + ": dataspace"));
      const auto dims = h5_dims(space.get());
      HPCTRAIN_REQUIRE(dims.size() == 1 && static_cast<std::int64_t>(dims[0]) == cnt,
                       where + ": holds a different number of elements than the manifest says");
      HPCTRAIN_REQUIRE(h5_read_int_attribute(ds.get(), "offset", where) == off,
                       where + ": offset attribute disagrees with the manifest");
      HPCTRAIN_CHECK_H5(H5Dread(ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, dest.data + off),
                        where + ": read");
    }
  }
}

}  // namespace hpctrain::io

namespace hpctrain::io {

std::size_t export_checkpoint(const std::string& step_dir, const std::string& out_path, const std::string& prefix) {
  const auto problems = verify_checkpoint(step_dir);
  if (!problems.empty()) {
    std::string all;
    for (const auto& p : problems) all += (all.empty() ? "" : "; ") + p.path + ": " + p.what;
    HPCTRAIN_FAIL("cannot export '" + step_dir + "': " + all);
  }
  const nlohmann::json m = read_manifest(step_dir);
  const fs::path out(out_path);
  const std::string tmp = (out.parent_path() / ("." + out.filename().string() + ".tmp")).string();
  std::size_t written = 0;
  try {
    H5Lock lock;
    H5File file(HPCTRAIN_CHECK_H5(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT),
                                  "export '" + tmp + "': create"));
    const H5PropList lcpl = detail::intermediate_group_creation();
    for (const auto& [name, shape] : checkpoint_tensor_list(m)) {
      if (name.rfind(prefix, 0) != 0) continue;
      std::vector<float> values(static_cast<std::size_t>(product(shape)));
      read_checkpoint_tensors(step_dir, {{name, shape, values.data()}});
      std::vector<hsize_t> dims(shape.begin(), shape.end());
      H5Dataspace space(HPCTRAIN_CHECK_H5(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
                                          "export: dataspace"));
      const std::string path = "/" + name.substr(prefix.size());
      H5Dataset ds(HPCTRAIN_CHECK_H5(H5Dcreate2(file.get(), path.c_str(), H5T_IEEE_F32LE, space.get(), lcpl.get(),
                                                H5P_DEFAULT, H5P_DEFAULT),
                                     "export '" + tmp + "' dataset '" + path + "': create"));
      HPCTRAIN_CHECK_H5(H5Dwrite(ds.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()),
                        "export '" + tmp + "' dataset '" + path + "': write");
      ++written;
    }
    h5_write_attribute(file.get(), "source_checkpoint", step_dir);
    h5_write_attribute(file.get(), "step", m.at("step").get<std::int64_t>());
    HPCTRAIN_CHECK_H5(H5Fclose(file.release()), "export '" + tmp + "': close");
    fsync_path(tmp, false, true);
    fs::rename(tmp, out);
  } catch (...) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw;
  }
  return written;
}

}  // namespace hpctrain::io
