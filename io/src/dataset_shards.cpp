#include "hpctrain/io/dataset_shards.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <system_error>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "appended_dataset.hpp"
#include "hpctrain/base/error.hpp"
#include "hpctrain/io/durable_file.hpp"
#include "hpctrain/io/h5.hpp"

namespace hpctrain::io {

namespace fs = std::filesystem;
using nlohmann::json;

bool is_sharded_dataset(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::is_regular_file(fs::path(path) / ShardIndexFormat::file_name, ec);
}

namespace {

/// `key` of `j` as a T, or an error naming the index and the key.
template <typename T>
T field(const json& j, const char* key, const std::string& where) {
  HPCTRAIN_REQUIRE(j.is_object() && j.contains(key), fmt::format("{}: \"{}\" is missing", where, key));
  try {
    return j.at(key).get<T>();
  } catch (const json::exception&) {
    HPCTRAIN_FAIL(fmt::format("{}: \"{}\" = {} has the wrong type", where, key, j.at(key).dump()));
  }
}

SampleType sample_type_named(const std::string& name, const std::string& where) {
  if (name == "uint8") return SampleType::uint8;
  if (name == "float32") return SampleType::float32;
  HPCTRAIN_FAIL(fmt::format("{}: \"sample_type\" = \"{}\" is not uint8 or float32", where, name));
}

/// The set's description from the index's top level.
DatasetInfo describe_set(const json& j, const std::string& dir, bool targets, const std::string& where) {
  const auto format = field<std::string>(j, "format", where);
  HPCTRAIN_REQUIRE(format == ShardIndexFormat::format_name,
                   fmt::format("{}: \"format\" = \"{}\", expected \"{}\"", where, format, ShardIndexFormat::format_name));
  const auto version = field<std::int64_t>(j, "format_version", where);
  HPCTRAIN_REQUIRE(version == ShardIndexFormat::version,
                   fmt::format("{}: format_version {} is not supported (this build reads {})", where, version,
                               ShardIndexFormat::version));
  DatasetInfo info;
  info.path = dir;
  info.count = field<std::int64_t>(j, "count", where);
  HPCTRAIN_REQUIRE(info.count >= 1, fmt::format("{}: \"count\" = {} must be at least 1", where, info.count));
  info.sample_shape = field<std::vector<std::int64_t>>(j, "shape", where);
  HPCTRAIN_REQUIRE(!info.sample_shape.empty(), where + ": \"shape\" is empty");
  info.sample_size = 1;
  for (const std::int64_t d : info.sample_shape) {
    HPCTRAIN_REQUIRE(d >= 1, fmt::format("{}: \"shape\" = [{}] has a dimension below 1", where,
                                         fmt::join(info.sample_shape, ", ")));
    info.sample_size *= d;
  }
  const auto classes = field<std::int64_t>(j, "classes", where);
  // 0 classes: regression data without /labels, which must then have /targets.
  HPCTRAIN_REQUIRE((classes >= 1 || (classes == 0 && targets)) && classes <= INT32_MAX,
                   fmt::format("{}: \"classes\" = {} is not a positive class count{}", where, classes,
                               classes == 0 ? " (0 only with \"targets\": true)" : ""));
  info.classes = static_cast<std::int32_t>(classes);
  info.stored_type = sample_type_named(field<std::string>(j, "sample_type", where), where);
  info.scale = field<double>(j, "scale", where);
  HPCTRAIN_REQUIRE(std::isfinite(info.scale), fmt::format("{}: \"scale\" = {} is not finite", where, info.scale));
  if (j.contains("source")) info.source = field<std::string>(j, "source", where);
  if (j.contains("class_names")) info.class_names = field<std::vector<std::string>>(j, "class_names", where);
  return info;
}

/// The shard entries: contiguous from 0, covering `count`, files inside `dir`.
std::vector<ShardEntry> list_shards(const json& j, const std::string& dir, std::int64_t count, const std::string& where) {
  HPCTRAIN_REQUIRE(j.contains("shards") && j.at("shards").is_array() && !j.at("shards").empty(),
                   where + ": \"shards\" is missing or not a non-empty list");
  std::vector<ShardEntry> shards;
  std::int64_t next = 0;
  for (const json& s : j.at("shards")) {
    const std::string entry_where = fmt::format("{} shard {}", where, shards.size());
    ShardEntry e;
    const auto file = field<std::string>(s, "file", entry_where);
    HPCTRAIN_REQUIRE(!file.empty() && file.find('/') == std::string::npos && file != "." && file != "..",
                     fmt::format("{}: \"file\" = \"{}\" must name a file inside the directory", entry_where, file));
    e.path = (fs::path(dir) / file).string();
    e.first = field<std::int64_t>(s, "first", entry_where);
    e.count = field<std::int64_t>(s, "count", entry_where);
    e.bytes = field<std::int64_t>(s, "bytes", entry_where);
    HPCTRAIN_REQUIRE(e.first == next, fmt::format("{}: \"first\" = {}, expected {} (shards hold contiguous samples "
                                                  "in order)",
                                                  entry_where, e.first, next));
    HPCTRAIN_REQUIRE(e.count >= 1, fmt::format("{}: \"count\" = {} must be at least 1", entry_where, e.count));
    next += e.count;
    shards.push_back(std::move(e));
  }
  HPCTRAIN_REQUIRE(next == count, fmt::format("{}: the shards hold {} samples but \"count\" = {}", where, next, count));
  return shards;
}

}  // namespace

ShardIndex read_shard_index(const std::string& dir) {
  const std::string path = (fs::path(dir) / ShardIndexFormat::file_name).string();
  const std::string where = fmt::format("sharded data set '{}': index '{}'", dir, path);
  std::ifstream in(path);
  HPCTRAIN_REQUIRE(in, fmt::format("{}: cannot be read", where));
  json j;
  try {
    in >> j;
  } catch (const json::exception& e) {
    HPCTRAIN_FAIL(fmt::format("{}: not valid JSON ({})", where, e.what()));
  }
  HPCTRAIN_REQUIRE(j.is_object(), where + ": not a JSON object");
  ShardIndex index;
  if (j.contains("targets")) index.targets = field<bool>(j, "targets", where);
  if (j.contains("feature_names")) index.feature_names = field<std::vector<std::string>>(j, "feature_names", where);
  index.info = describe_set(j, dir, index.targets, where);
  index.shards = list_shards(j, dir, index.info.count, where);
  return index;
}

std::vector<ShardPiece> shards_overlapping(const ShardIndex& index, std::int64_t first, std::int64_t count) {
  HPCTRAIN_REQUIRE(first >= 0 && count >= 0 && first + count <= index.info.count,
                   fmt::format("sharded data set '{}': samples [{}, {}) are not inside its {} samples",
                               index.info.path, first, first + count, index.info.count));
  std::vector<ShardPiece> pieces;
  const std::int64_t end = first + count;
  for (std::size_t s = 0; s < index.shards.size(); ++s) {
    const ShardEntry& e = index.shards[s];
    const std::int64_t lo = std::max(first, e.first), hi = std::min(end, e.first + e.count);
    if (lo < hi) pieces.push_back({s, lo - e.first, hi - lo});
  }
  return pieces;
}

void require_shard_matches(const ShardIndex& index, std::size_t shard, const DatasetInfo& opened, std::int64_t bytes) {
  const ShardEntry& e = index.shards.at(shard);
  const DatasetInfo& set = index.info;
  const std::string where =
      fmt::format("sharded data set '{}': shard {} '{}' does not match the index", set.path, shard, e.path);
  HPCTRAIN_REQUIRE(opened.count == e.count,
                   fmt::format("{}: it holds {} samples, the index says {}", where, opened.count, e.count));
  HPCTRAIN_REQUIRE(opened.sample_shape == set.sample_shape,
                   fmt::format("{}: samples of shape [{}], the index says [{}]", where,
                               fmt::join(opened.sample_shape, ", "), fmt::join(set.sample_shape, ", ")));
  HPCTRAIN_REQUIRE(opened.classes == set.classes,
                   fmt::format("{}: {} classes, the index says {}", where, opened.classes, set.classes));
  HPCTRAIN_REQUIRE(opened.stored_type == set.stored_type && opened.scale == set.scale,
                   fmt::format("{}: {} values with scale {}, the index says {} with scale {}", where,
                               to_string(opened.stored_type), opened.scale, to_string(set.stored_type), set.scale));
  HPCTRAIN_REQUIRE(bytes == e.bytes, fmt::format("{}: it is {} bytes, {} when the index was written (changed or "
                                                 "replaced since)",
                                                 where, bytes, e.bytes));
}

namespace {

/// Copies samples [first, first + count) of the open source datasets into a new shard file.
/// The input's optional parts: /labels and /targets (negative when absent) and feature_names.
struct ShardSources {
  hid_t samples = -1, labels = -1, targets = -1;
  std::vector<std::string> feature_names;
};

/// Copies rows [at, at + n) of the 1-D dataset `src` (as `mem_type`) to `dst`.
void copy_rows_1d(hid_t src, AppendedDataset& dst, hid_t mem_type, std::size_t value_bytes, std::int64_t at,
                  std::int64_t n, const std::string& where) {
  std::vector<unsigned char> values(static_cast<std::size_t>(n) * value_bytes);
  H5Dataspace space(HPCTRAIN_CHECK_H5(H5Dget_space(src), where));
  const hsize_t start = static_cast<hsize_t>(at), extent = static_cast<hsize_t>(n);
  HPCTRAIN_CHECK_H5(H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, &start, nullptr, &extent, nullptr), where);
  H5Dataspace ms(HPCTRAIN_CHECK_H5(H5Screate_simple(1, &extent, nullptr), where));
  HPCTRAIN_CHECK_H5(H5Dread(src, mem_type, ms.get(), space.get(), H5P_DEFAULT, values.data()), where + ": read the input");
  dst.append(mem_type, values.data(), extent);
}

void write_shard(const ShardSources& src, const DatasetInfo& info, std::int64_t first, std::int64_t count,
                 std::int64_t block, const std::string& path) {
  const std::string where = fmt::format("data shard: write '{}'", path);
  H5File file(HPCTRAIN_CHECK_H5(H5Fcreate(path.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT),
                                where + ": create file"));
  const bool bytes = info.stored_type == SampleType::uint8;
  const hid_t mem_type = bytes ? H5T_NATIVE_UINT8 : H5T_NATIVE_FLOAT;
  std::vector<hsize_t> dims(info.sample_shape.begin(), info.sample_shape.end());
  const auto chunk = static_cast<hsize_t>(std::min<std::int64_t>(1024, count));
  AppendedDataset samples(file.get(), DatasetFormat::samples, bytes ? H5T_STD_U8LE : H5T_IEEE_F32LE, dims, chunk, where);
  std::optional<AppendedDataset> labels, targets;
  if (src.labels >= 0) labels.emplace(file.get(), DatasetFormat::labels, H5T_STD_I32LE, std::vector<hsize_t>{}, chunk, where);
  if (src.targets >= 0) targets.emplace(file.get(), "/targets", H5T_IEEE_F64LE, std::vector<hsize_t>{}, chunk, where);
  const auto size = static_cast<std::size_t>(info.sample_size);
  std::vector<unsigned char> values;
  const std::size_t rank = dims.size() + 1;
  H5Dataspace sspace(HPCTRAIN_CHECK_H5(H5Dget_space(src.samples), where));
  for (std::int64_t at = first; at < first + count; at += block) {
    const std::int64_t n = std::min(block, first + count - at);
    std::vector<hsize_t> start(rank, 0), extent(rank);
    start[0] = static_cast<hsize_t>(at);
    extent[0] = static_cast<hsize_t>(n);
    for (std::size_t d = 1; d < rank; ++d) extent[d] = dims[d - 1];
    values.resize(static_cast<std::size_t>(n) * size * (bytes ? 1 : sizeof(float)));
    HPCTRAIN_CHECK_H5(H5Sselect_hyperslab(sspace.get(), H5S_SELECT_SET, start.data(), nullptr, extent.data(), nullptr),
                      where);
    H5Dataspace ms(HPCTRAIN_CHECK_H5(H5Screate_simple(static_cast<int>(rank), extent.data(), nullptr), where));
    HPCTRAIN_CHECK_H5(H5Dread(src.samples, mem_type, ms.get(), sspace.get(), H5P_DEFAULT, values.data()),
                      where + ": read the input's samples");
    samples.append(mem_type, values.data(), static_cast<hsize_t>(n));
    if (labels) copy_rows_1d(src.labels, *labels, H5T_NATIVE_INT32, sizeof(std::int32_t), at, n, where + " labels");
    if (targets) copy_rows_1d(src.targets, *targets, H5T_NATIVE_DOUBLE, sizeof(double), at, n, where + " targets");
  }
  h5_write_attribute(samples.get(), "scale", info.scale);
  const hid_t root = file.get();
  h5_write_attribute(root, "format", std::string(DatasetFormat::format_name));
  h5_write_attribute(root, "format_version", DatasetFormat::version);
  h5_write_attribute(root, "count", count);
  h5_write_attribute(root, "shape", info.sample_shape);
  h5_write_attribute(root, "classes", std::int64_t{info.classes});
  h5_write_attribute(root, "source", info.source);
  if (!info.class_names.empty()) h5_write_attribute(root, "class_names", info.class_names);
  if (!src.feature_names.empty()) h5_write_attribute(root, "feature_names", src.feature_names);
  h5_write_attribute(root, "first_sample", first);
  HPCTRAIN_CHECK_H5(H5Fflush(file.get(), H5F_SCOPE_GLOBAL), where + ": flush");
}

json index_json(const ShardIndex& index) {
  const DatasetInfo& info = index.info;
  json j = {{"format", ShardIndexFormat::format_name},
            {"format_version", ShardIndexFormat::version},
            {"count", info.count},
            {"shape", info.sample_shape},
            {"classes", info.classes},
            {"sample_type", to_string(info.stored_type)},
            {"scale", info.scale},
            {"source", info.source}};
  if (!info.class_names.empty()) j["class_names"] = info.class_names;
  if (index.targets) j["targets"] = true;
  if (!index.feature_names.empty()) j["feature_names"] = index.feature_names;
  json list = json::array();
  for (const ShardEntry& e : index.shards) {
    list.push_back({{"file", fs::path(e.path).filename().string()}, {"first", e.first}, {"count", e.count},
                    {"bytes", e.bytes}});
  }
  j["shards"] = std::move(list);
  return j;
}

/// A temporary directory beside the output, removed unless committed (renamed to the output).
class StagedDirectory {
 public:
  explicit StagedDirectory(std::string final_dir) : final_(std::move(final_dir)) {
    const fs::path out(final_);
    const fs::path parent = out.has_parent_path() ? out.parent_path() : fs::path(".");
    std::error_code ec;
    HPCTRAIN_REQUIRE(!fs::exists(out, ec), fmt::format("data shard: --out '{}' already exists; give a new directory "
                                                       "(the shards are written under a temporary name and renamed)",
                                                       final_));
    HPCTRAIN_REQUIRE(fs::is_directory(parent, ec),
                     fmt::format("data shard: --out '{}': its parent directory '{}' does not exist", final_,
                                 parent.string()));
    temp_ = fmt::format("{}.partial-{}", final_, ::getpid());
    fs::remove_all(temp_, ec);
    HPCTRAIN_REQUIRE(fs::create_directory(temp_, ec),
                     fmt::format("data shard: cannot create '{}': {}", temp_, ec.message()));
  }
  ~StagedDirectory() {
    std::error_code ec;
    if (!committed_) fs::remove_all(temp_, ec);
  }
  StagedDirectory(const StagedDirectory&) = delete;
  StagedDirectory& operator=(const StagedDirectory&) = delete;
  const std::string& path() const noexcept { return temp_; }
  void commit() {
    fsync_path(temp_, /*directory=*/true, /*required=*/true);
    std::error_code ec;
    fs::rename(temp_, final_, ec);
    HPCTRAIN_REQUIRE(!ec, fmt::format("data shard: cannot rename '{}' to '{}': {}", temp_, final_, ec.message()));
    committed_ = true;
    const fs::path out(final_);
    fsync_path(out.has_parent_path() ? out.parent_path().string() : std::string("."), /*directory=*/true);
  }

 private:
  std::string final_, temp_;
  bool committed_ = false;
};

}  // namespace

ShardResult split_dataset(const std::string& in, const std::string& out_dir, const ShardOptions& o) {
  HPCTRAIN_REQUIRE(!is_sharded_dataset(in),
                   fmt::format("data shard: --in '{}' is already a sharded data set; give one data set file", in));
  ShardResult result;
  bool labelled = true;
  {
    std::error_code ec;
    HPCTRAIN_REQUIRE(fs::is_regular_file(in, ec), fmt::format("data shard: --in '{}': no such file", in));
    H5Lock lock;
    h5_quiet_errors();
    if (H5Fis_hdf5(in.c_str()) > 0) {
      H5File file(HPCTRAIN_CHECK_H5(H5Fopen(in.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), "data shard: open '" + in + "'"));
      labelled = h5_exists(file.get(), DatasetFormat::labels);
      result.index.targets = h5_exists(file.get(), "/targets");
      if (h5_has_attribute(file.get(), "feature_names")) {
        result.index.feature_names = h5_read_string_array_attribute(file.get(), "feature_names", "data shard: '" + in + "'");
      }
    }
  }
  // Validates the input: with /labels as any training file (labels included), without as
  // regression data.
  const DatasetInfo info = labelled || !result.index.targets ? DatasetReader(in).info() : describe_unlabelled_dataset(in);
  HPCTRAIN_REQUIRE(o.shards >= 1 && o.shards <= info.count,
                   fmt::format("data shard: --shards {} must lie in [1, {}] (the samples of '{}')", o.shards,
                               info.count, in));
  HPCTRAIN_REQUIRE(o.block_samples >= 1, "data shard: block_samples must be at least 1");
  StagedDirectory staged(out_dir);
  result.index.info = info;
  result.index.info.path = out_dir;
  {
    H5Lock lock;
    const std::string where = fmt::format("data shard: read '{}'", in);
    H5File file(HPCTRAIN_CHECK_H5(H5Fopen(in.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), where + ": open"));
    H5Dataset samples(HPCTRAIN_CHECK_H5(H5Dopen2(file.get(), DatasetFormat::samples, H5P_DEFAULT), where));
    std::optional<H5Dataset> labels, targets;
    ShardSources src;
    src.samples = samples.get();
    src.feature_names = result.index.feature_names;
    if (labelled) {
      labels.emplace(HPCTRAIN_CHECK_H5(H5Dopen2(file.get(), DatasetFormat::labels, H5P_DEFAULT), where));
      src.labels = labels->get();
    }
    if (result.index.targets) {
      const std::string twhere = where + " /targets";
      targets.emplace(HPCTRAIN_CHECK_H5(H5Dopen2(file.get(), "/targets", H5P_DEFAULT), twhere));
      H5Dataspace tspace(HPCTRAIN_CHECK_H5(H5Dget_space(targets->get()), twhere));
      const auto tdims = h5_dims(tspace.get());
      HPCTRAIN_REQUIRE(tdims.size() == 1 && static_cast<std::int64_t>(tdims[0]) == info.count,
                       fmt::format("{}: must be one value per sample ({} samples)", twhere, info.count));
      src.targets = targets->get();
    }
    for (std::int64_t s = 0; s < o.shards; ++s) {
      // Sizes differ by at most one: shard s holds [s N / K, (s + 1) N / K).
      ShardEntry e;
      e.first = s * info.count / o.shards;
      e.count = (s + 1) * info.count / o.shards - e.first;
      const std::string name = fmt::format("shard-{:05d}.h5", s);
      const std::string temp_path = (fs::path(staged.path()) / name).string();
      write_shard(src, info, e.first, e.count, o.block_samples, temp_path);
      fsync_path(temp_path, /*directory=*/false, /*required=*/true);
      e.bytes = static_cast<std::int64_t>(fs::file_size(temp_path));
      e.path = (fs::path(out_dir) / name).string();
      result.bytes += e.bytes;
      result.index.shards.push_back(std::move(e));
    }
  }
  const std::string index_path = (fs::path(staged.path()) / ShardIndexFormat::file_name).string();
  {
    std::ofstream out(index_path);
    out << index_json(result.index).dump(1) << '\n';
    HPCTRAIN_REQUIRE(out.flush(), fmt::format("data shard: cannot write '{}'", index_path));
  }
  fsync_path(index_path, /*directory=*/false, /*required=*/true);
  staged.commit();
  return result;
}

}  // namespace hpctrain::io
