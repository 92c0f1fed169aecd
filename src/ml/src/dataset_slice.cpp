#include "hpctrain/ml/dataset_slice.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <functional>

#include <fmt/format.h>

#include "hpctrain/base/error.hpp"
#include "hpctrain/io/dataset.hpp"
#include "hpctrain/io/dataset_shards.hpp"
#include "hpctrain/io/h5.hpp"
#include "hpctrain/base/vector_clones.hpp"

namespace hpctrain::ml {

namespace fs = std::filesystem;
using io::H5Dataset;
using io::H5Dataspace;
using io::H5File;

namespace {

H5File open_dataset_file(const std::string& path) {
  const std::string where = fmt::format("data set '{}'", path);
  std::error_code ec;
  HPCTRAIN_REQUIRE(fs::exists(path, ec), where + ": no such file");
  HPCTRAIN_REQUIRE(!fs::is_directory(path, ec),
                   fmt::format("{}: is a directory without an {} (not a sharded data set: `hpctrain data shard` "
                               "writes one); give a data set file or a sharded directory",
                               where, io::ShardIndexFormat::file_name));
  io::h5_quiet_errors();
  HPCTRAIN_REQUIRE(H5Fis_hdf5(path.c_str()) > 0, where + ": not an HDF5 file (no HDF5 signature)");
  H5File file(HPCTRAIN_CHECK_H5(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), where + ": open"));
  HPCTRAIN_REQUIRE(io::h5_exists(file.get(), io::DatasetFormat::samples),
                   fmt::format("{} {}: dataset is missing (not an hpctrain data set?)", where,
                               io::DatasetFormat::samples));
  return file;
}

/// The HDF5 memory type of T (the values a read converts to).
template <typename T>
hid_t native_type();
template <>
hid_t native_type<double>() { return H5T_NATIVE_DOUBLE; }
template <>
hid_t native_type<std::uint8_t>() { return H5T_NATIVE_UINT8; }

/// Rows [first, first + rows) of a dataset whose first dimension is N, as T (doubles, or a
/// uint8 dataset's bytes as stored).
template <typename T = double>
std::vector<T> read_rows(hid_t dset, std::int64_t first, std::int64_t rows, std::int64_t row_size,
                         const std::string& where) {
  H5Dataspace fspace(HPCTRAIN_CHECK_H5(H5Dget_space(dset), where));
  std::vector<hsize_t> dims = io::h5_dims(fspace.get());
  std::vector<hsize_t> start(dims.size(), 0), count = dims;
  start[0] = static_cast<hsize_t>(first);
  count[0] = static_cast<hsize_t>(rows);
  std::vector<T> out(static_cast<std::size_t>(rows * row_size));
  if (rows == 0) return out;
  HPCTRAIN_CHECK_H5(H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr),
                    where + ": select rows");
  const hsize_t n = out.size();
  H5Dataspace mspace(HPCTRAIN_CHECK_H5(H5Screate_simple(1, &n, nullptr), where));
  HPCTRAIN_CHECK_H5(H5Dread(dset, native_type<T>(), mspace.get(), fspace.get(), H5P_DEFAULT, out.data()),
                    where + ": read");
  return out;
}

/// /targets of the file's rows [local_first, local_first + s.rows) into s.targets.
void read_targets(hid_t file, const std::string& file_where, std::int64_t local_first, DatasetSlice& s) {
  const std::string twhere = file_where + " " + RegressionFormat::targets;
  HPCTRAIN_REQUIRE(io::h5_exists(file, RegressionFormat::targets),
                   twhere + ": dataset is missing (regression needs targets: hpctrain data import-csv --target)");
  H5Dataset targets(HPCTRAIN_CHECK_H5(H5Dopen2(file, RegressionFormat::targets, H5P_DEFAULT), twhere));
  H5Dataspace tspace(HPCTRAIN_CHECK_H5(H5Dget_space(targets.get()), twhere));
  const auto tdims = io::h5_dims(tspace.get());
  HPCTRAIN_REQUIRE(tdims.size() == 1 && static_cast<std::int64_t>(tdims[0]) == s.total_samples,
                   fmt::format("{}: must be one value per sample ({} samples)", twhere, s.total_samples));
  s.targets = read_rows(targets.get(), local_first, s.rows, 1, twhere);
  for (std::size_t i = 0; i < s.targets.size(); ++i) {
    HPCTRAIN_REQUIRE(std::isfinite(s.targets[i]), fmt::format("{}: target of sample {} is {}", twhere,
                                                              s.first + static_cast<std::int64_t>(i), s.targets[i]));
  }
}

/// /labels of the file's rows [local_first, local_first + s.rows) and the `classes` attribute
/// into s.labels and s.classes.
void read_labels(hid_t file, const std::string& file_where, std::int64_t local_first, DatasetSlice& s) {
  const std::string lwhere = file_where + " " + io::DatasetFormat::labels;
  HPCTRAIN_REQUIRE(io::h5_exists(file, io::DatasetFormat::labels),
                   lwhere + ": dataset is missing (classification needs labels)");
  HPCTRAIN_REQUIRE(io::h5_has_attribute(file, "classes"),
                   file_where + ": the root attribute `classes` is missing");
  s.classes = io::h5_read_int_attribute(file, "classes", file_where);
  HPCTRAIN_REQUIRE(s.classes >= 2, fmt::format("{}: `classes` is {}; classification needs at least 2", file_where,
                                               s.classes));
  H5Dataset labels(HPCTRAIN_CHECK_H5(H5Dopen2(file, io::DatasetFormat::labels, H5P_DEFAULT), lwhere));
  H5Dataspace lspace(HPCTRAIN_CHECK_H5(H5Dget_space(labels.get()), lwhere));
  const auto ldims = io::h5_dims(lspace.get());
  HPCTRAIN_REQUIRE(ldims.size() == 1 && static_cast<std::int64_t>(ldims[0]) == s.total_samples,
                   fmt::format("{}: must be one label per sample ({} samples)", lwhere, s.total_samples));
  const std::vector<double> values = read_rows(labels.get(), local_first, s.rows, 1, lwhere);
  s.labels.resize(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    const double v = values[i];
    HPCTRAIN_REQUIRE(v >= 0 && v < static_cast<double>(s.classes) && v == std::floor(v),
                     fmt::format("{}: label of sample {} is {}, outside [0, {})", lwhere,
                                 s.first + static_cast<std::int64_t>(i), v, s.classes));
    s.labels[i] = static_cast<std::int32_t>(v);
  }
}

/// "<where>: sample S column J is V (the fitters need finite values)", S global.
std::string non_finite_message(const std::string& where, const DatasetSlice& s, std::size_t at, double value) {
  const auto f = static_cast<std::size_t>(s.features);
  return fmt::format("{}: sample {} {} is {} (the fitters need finite values)", where,
                     s.first + static_cast<std::int64_t>(at / f), s.column_name(static_cast<std::int64_t>(at % f)),
                     value);
}

/// The f64 value of every stored byte: double(v) * scale, the product the fitters see.
std::array<double, 256> byte_values(double scale) {
  std::array<double, 256> value{};
  for (int v = 0; v < 256; ++v) value[static_cast<std::size_t>(v)] = static_cast<double>(v) * scale;
  return value;
}

/// s.stored widened to f64 rows: double(v) * scale, then (x - mean_j) / std_j when
/// standardised, with the roundings of scaling the doubles at load and standardising them in
/// place: CMake compiles this file with -ffp-contract=off, so no fused multiply-add skips the
/// rounding of the product.
template <typename T>
inline HPCTRAIN_ALWAYS_INLINE void widen_stored_inline(const DatasetSlice& s, std::int64_t first,
                                                               std::int64_t count, T* out) {
  const std::int64_t d = s.features;
  const std::uint8_t* in = s.stored.data() + static_cast<std::size_t>(first * d);
  const double scale = s.scale;
  if (s.standardize_mean.empty()) {
    for (std::int64_t i = 0; i < count * d; ++i) out[i] = static_cast<T>(static_cast<double>(in[i]) * scale);
    return;
  }
  const double* mean = s.standardize_mean.data();
  const double* sd = s.standardize_std.data();
  for (std::int64_t i = 0; i < count; ++i, in += d, out += d) {
    for (std::int64_t j = 0; j < d; ++j) out[j] = static_cast<T>((static_cast<double>(in[j]) * scale - mean[j]) / sd[j]);
  }
}

HPCTRAIN_VECTOR_CLONES void widen_stored(const DatasetSlice& s, std::int64_t first, std::int64_t count, double* out) {
  widen_stored_inline(s, first, count, out);
}
HPCTRAIN_VECTOR_CLONES void widen_stored(const DatasetSlice& s, std::int64_t first, std::int64_t count, float* out) {
  widen_stored_inline(s, first, count, out);
}

}  // namespace

const double* DatasetSlice::rows_f64(std::int64_t first_row, std::int64_t count, double* buffer) const {
  if (storage == SliceStorage::f64) return row(first_row);
  widen_stored(*this, first_row, count, buffer);
  return buffer;
}

void DatasetSlice::widen_rows(std::int64_t first_row, std::int64_t count, double* out) const {
  if (storage == SliceStorage::f64) {
    std::copy(row(first_row), row(first_row) + count * features, out);
    return;
  }
  widen_stored(*this, first_row, count, out);
}

void DatasetSlice::widen_rows(std::int64_t first_row, std::int64_t count, float* out) const {
  if (storage == SliceStorage::f64) {
    std::copy(row(first_row), row(first_row) + count * features, out);
    return;
  }
  widen_stored(*this, first_row, count, out);
}

void DatasetSlice::widen_all() {
  if (storage == SliceStorage::f64) return;
  samples.resize(static_cast<std::size_t>(rows * features));
  widen_stored(*this, 0, rows, samples.data());
  storage = SliceStorage::f64;
  stored = {};
  standardize_mean = {};
  standardize_std = {};
}

std::string DatasetSlice::column_name(std::int64_t j) const {
  if (static_cast<std::size_t>(j) < feature_names.size()) {
    return fmt::format("column {} ('{}')", j, feature_names[static_cast<std::size_t>(j)]);
  }
  return fmt::format("column {}", j);
}

std::int64_t dataset_sample_count(const std::string& path) {
  if (io::is_sharded_dataset(path)) return io::read_shard_index(path).info.count;
  io::H5Lock lock;
  H5File file = open_dataset_file(path);
  const std::string where = fmt::format("data set '{}' {}", path, io::DatasetFormat::samples);
  H5Dataset samples(HPCTRAIN_CHECK_H5(H5Dopen2(file.get(), io::DatasetFormat::samples, H5P_DEFAULT), where));
  H5Dataspace space(HPCTRAIN_CHECK_H5(H5Dget_space(samples.get()), where));
  const auto dims = io::h5_dims(space.get());
  HPCTRAIN_REQUIRE(dims.size() >= 2, fmt::format("{}: has {} dimension(s); expected N x (sample dims)", where,
                                                 dims.size()));
  return static_cast<std::int64_t>(dims[0]);
}

namespace {

/// Rows [local_first, local_first + rows) of the data set file `path`, whose sample 0 is global
/// sample `offset` (s.first and the messages count globally). `check` sees the file's description
/// before any row is read (the count and partition check for a file, the index check for a shard).
DatasetSlice read_file_rows(const std::string& path, std::int64_t offset, std::int64_t local_first, std::int64_t rows,
                            SliceColumns columns, const std::function<void(const io::DatasetInfo&)>& check) {
  io::H5Lock lock;
  H5File file = open_dataset_file(path);
  const std::string file_where = fmt::format("data set '{}'", path);
  const std::string where = file_where + " " + io::DatasetFormat::samples;
  H5Dataset samples(HPCTRAIN_CHECK_H5(H5Dopen2(file.get(), io::DatasetFormat::samples, H5P_DEFAULT), where));
  H5Dataspace space(HPCTRAIN_CHECK_H5(H5Dget_space(samples.get()), where));
  const auto dims = io::h5_dims(space.get());
  HPCTRAIN_REQUIRE(dims.size() >= 2, fmt::format("{}: has {} dimension(s); expected N x (sample dims)", where,
                                                 dims.size()));
  DatasetSlice s;
  s.path = path;
  s.total_samples = static_cast<std::int64_t>(dims[0]);
  s.features = 1;
  for (std::size_t i = 1; i < dims.size(); ++i) s.features *= static_cast<std::int64_t>(dims[i]);
  HPCTRAIN_REQUIRE(s.features > 0, where + ": a sample has 0 values");
  s.first = offset + local_first;
  s.rows = rows;
  io::H5Type type(HPCTRAIN_CHECK_H5(H5Dget_type(samples.get()), where));
  const bool is_uint8 = H5Tget_class(type.get()) == H5T_INTEGER && H5Tget_size(type.get()) == 1;
  // Same default as io::DatasetReader: uint8 pixels mean v / 255 unless `scale` says otherwise.
  const double scale = io::h5_has_attribute(samples.get(), "scale")
                           ? io::h5_read_double_attribute(samples.get(), "scale", where)
                           : (is_uint8 ? 1.0 / 255.0 : 1.0);
  io::DatasetInfo described;
  described.path = path;
  described.count = s.total_samples;
  for (std::size_t i = 1; i < dims.size(); ++i) described.sample_shape.push_back(static_cast<std::int64_t>(dims[i]));
  described.sample_size = s.features;
  described.stored_type = is_uint8 ? io::SampleType::uint8 : io::SampleType::float32;
  described.scale = scale;
  if (io::h5_has_attribute(file.get(), "classes")) {
    described.classes = static_cast<std::int32_t>(io::h5_read_int_attribute(file.get(), "classes", file_where));
  }
  check(described);
  if (io::h5_has_attribute(file.get(), RegressionFormat::feature_names)) {
    s.feature_names = io::h5_read_string_array_attribute(file.get(), RegressionFormat::feature_names, file_where);
  }
  s.scale = scale;
  if (is_uint8) {
    s.storage = SliceStorage::uint8;
    s.stored = read_rows<std::uint8_t>(samples.get(), local_first, s.rows, s.features, where);
    // A byte is finite; its product with `scale` is checked once per byte value.
    const std::array<double, 256> value = byte_values(scale);
    for (std::size_t i = 0; i < s.stored.size(); ++i) {
      const double x = value[s.stored[i]];
      if (!std::isfinite(x)) HPCTRAIN_FAIL(non_finite_message(where, s, i, x));
    }
  } else {
    s.samples = read_rows(samples.get(), local_first, s.rows, s.features, where);
    for (std::size_t i = 0; i < s.samples.size(); ++i) {
      s.samples[i] *= scale;
      if (!std::isfinite(s.samples[i])) HPCTRAIN_FAIL(non_finite_message(where, s, i, s.samples[i]));
    }
  }
  if (columns.targets) read_targets(file.get(), file_where, local_first, s);
  if (columns.labels) {
    read_labels(file.get(), file_where, local_first, s);
  } else if (columns.labels_if_present && io::h5_exists(file.get(), io::DatasetFormat::labels) &&
             io::h5_has_attribute(file.get(), "classes") &&
             io::h5_read_int_attribute(file.get(), "classes", file_where) >= 2) {
    read_labels(file.get(), file_where, local_first, s);
  }
  return s;
}

/// `piece` (the next rows) appended to `out`; the first piece also gives the columns' metadata.
void append_piece(DatasetSlice& out, DatasetSlice&& piece, bool first_piece) {
  if (first_piece) {
    out.features = piece.features;
    out.classes = piece.classes;
    out.feature_names = std::move(piece.feature_names);
    out.storage = piece.storage;  // every shard's (io::require_shard_matches: type and scale)
    out.scale = piece.scale;
    // A slice inside one shard (the usual case) keeps the piece's rows without a copy.
    out.samples = std::move(piece.samples);
    out.stored = std::move(piece.stored);
    out.targets = std::move(piece.targets);
    out.labels = std::move(piece.labels);
    return;
  }
  // s.classes is set only where labels were read: a shard read with labels after one without
  // (or the other way round) differs here.
  HPCTRAIN_REQUIRE(piece.classes == out.classes,
                   fmt::format("data set '{}': labels read with `classes` {}, {} in the shard before it", piece.path,
                               piece.classes, out.classes));
  out.samples.insert(out.samples.end(), piece.samples.begin(), piece.samples.end());
  out.stored.insert(out.stored.end(), piece.stored.begin(), piece.stored.end());
  out.targets.insert(out.targets.end(), piece.targets.begin(), piece.targets.end());
  out.labels.insert(out.labels.end(), piece.labels.begin(), piece.labels.end());
}

/// This rank's slice of the sharded data set `dir`: the pieces of the shards overlapping it
/// (io::shards_overlapping), each shard checked against the index before its rows are read,
/// concatenated in order. A rank without samples reads 0 rows of the shard holding its start,
/// so that every rank sees the same columns (labels present or not, classes, names).
DatasetSlice read_sharded_slice(const std::string& dir, const io::ShardIndex& index, const SamplePartition& part,
                                SliceColumns columns) {
  HPCTRAIN_REQUIRE(index.info.count == part.total_samples,
                   fmt::format("sharded data set '{}': holds {} samples, the partition was made for {}", dir,
                               index.info.count, part.total_samples));
  std::vector<io::ShardPiece> pieces = io::shards_overlapping(index, part.first_sample, part.sample_count);
  if (pieces.empty()) {
    // No rows here: the shard holding this rank's start (or the last sample), read for 0 rows.
    pieces = io::shards_overlapping(index, std::min(part.first_sample, index.info.count - 1), 1);
    pieces.front().count = 0;
  }
  DatasetSlice out;
  out.path = dir;
  out.total_samples = index.info.count;
  out.first = part.first_sample;
  out.rows = part.sample_count;
  for (std::size_t k = 0; k < pieces.size(); ++k) {
    const io::ShardPiece& p = pieces[k];
    const io::ShardEntry& e = index.shards[p.shard];
    std::error_code ec;
    HPCTRAIN_REQUIRE(fs::is_regular_file(e.path, ec),
                     fmt::format("sharded data set '{}': shard {} '{}': no such file (the index lists it)", dir,
                                 p.shard, e.path));
    DatasetSlice piece = read_file_rows(e.path, e.first, p.first, p.count, columns, [&](const io::DatasetInfo& opened) {
      io::require_shard_matches(index, p.shard, opened, static_cast<std::int64_t>(fs::file_size(e.path)));
    });
    append_piece(out, std::move(piece), k == 0);
  }
  return out;
}

}  // namespace

DatasetSlice read_dataset_slice(const std::string& path, const SamplePartition& part, SliceColumns columns) {
  if (io::is_sharded_dataset(path)) return read_sharded_slice(path, io::read_shard_index(path), part, columns);
  return read_file_rows(path, 0, part.first_sample, part.sample_count, columns, [&](const io::DatasetInfo& opened) {
    HPCTRAIN_REQUIRE(opened.count == part.total_samples,
                     fmt::format("data set '{}' {}: holds {} samples, the partition was made for {}", path,
                                 io::DatasetFormat::samples, opened.count, part.total_samples));
  });
}

RankSlice read_rank_slice(const std::string& path, int rank, int ranks, SliceColumns columns) {
  RankSlice r;
  if (io::is_sharded_dataset(path)) {
    const io::ShardIndex index = io::read_shard_index(path);
    r.part = partition_samples(index.info.count, rank, ranks);
    r.data = read_sharded_slice(path, index, r.part, columns);
  } else {
    r.part = partition_samples(dataset_sample_count(path), rank, ranks);
    r.data = read_dataset_slice(path, r.part, columns);
  }
  return r;
}

}  // namespace hpctrain::ml
