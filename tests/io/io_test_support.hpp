#pragma once
// Helpers for the io tests: temporary directories, IDX writers, and an HDF5 data set writer
// that uses the raw HDF5 API (not hpctrain's import), so reader tests do not trust the writer
// they test against.
#include <hdf5.h>
#include <stdlib.h>
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#ifndef HPCTRAIN_FASHION_MNIST_DIR
#define HPCTRAIN_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"
#endif

namespace hpctrain::io::test {

/// A fresh directory under $TMPDIR (or /tmp), removed with its contents at scope exit.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string templ = std::string(base && *base ? base : "/tmp") + "/hpctrain-io-XXXXXX";
    if (!mkdtemp(templ.data())) throw std::runtime_error("mkdtemp failed");
    path_ = templ;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  /// Names of the entries in the directory.
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(path_)) {
      out.push_back(e.path().filename().string());
    }
    return out;
  }

 private:
  std::string path_;
};

inline std::string fashion_file(const std::string& name) {
  return std::string(HPCTRAIN_FASHION_MNIST_DIR) + "/" + name;
}

/// Bytes of an IDX file: magic (0, 0, type, ndims), big-endian dims, data.
inline std::vector<unsigned char> idx_bytes(int type, const std::vector<std::uint32_t>& dims,
                                            const std::vector<unsigned char>& data) {
  std::vector<unsigned char> out = {0, 0, static_cast<unsigned char>(type),
                                    static_cast<unsigned char>(dims.size())};
  for (std::uint32_t d : dims) {
    for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<unsigned char>((d >> s) & 0xFF));
  }
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

inline void write_file(const std::string& path, const std::vector<unsigned char>& bytes,
                       bool gzip) {
  if (gzip) {
    gzFile f = gzopen(path.c_str(), "wb");
    if (!f) throw std::runtime_error("gzopen " + path);
    if (!bytes.empty()) gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(f);
  } else {
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
}

/// Pixel value of element e of synthetic sample i (so any read can be checked by formula).
inline unsigned char synthetic_pixel(std::int64_t i, std::int64_t e) {
  return static_cast<unsigned char>((i * 31 + e * 7) % 251);
}
inline std::int32_t synthetic_label(std::int64_t i, std::int32_t classes) {
  return static_cast<std::int32_t>((i * 7) % classes);
}

/// Writes synthetic IDX files (n images of rows x cols, labels) into dir; returns their paths.
inline std::pair<std::string, std::string> write_synthetic_idx(const std::string& dir,
                                                               std::uint32_t n, std::uint32_t rows,
                                                               std::uint32_t cols, bool gzip,
                                                               std::int32_t classes = 10) {
  std::vector<unsigned char> px(std::size_t{n} * rows * cols);
  for (std::uint32_t i = 0; i < n; ++i) {
    for (std::uint32_t e = 0; e < rows * cols; ++e) {
      px[std::size_t{i} * rows * cols + e] = synthetic_pixel(i, e);
    }
  }
  std::vector<unsigned char> lb(n);
  for (std::uint32_t i = 0; i < n; ++i) lb[i] = static_cast<unsigned char>(synthetic_label(i, classes));
  std::string img = dir + (gzip ? "/images.idx.gz" : "/images.idx");
  std::string lab = dir + (gzip ? "/labels.idx.gz" : "/labels.idx");
  write_file(img, idx_bytes(0x08, {n, rows, cols}, px), gzip);
  write_file(lab, idx_bytes(0x08, {n}, lb), gzip);
  return {img, lab};
}

/// What write_dataset_file writes; tests break one field at a time.
struct RawDataset {
  std::vector<hsize_t> sample_dims = {1, 4, 3};  // per sample
  std::int64_t count = 50;
  std::int32_t classes = 10;
  bool write_samples = true;
  bool write_labels = true;
  std::int64_t label_count = -1;            // -1: = count
  std::vector<std::int64_t> shape_attr;     // empty: = sample_dims
  std::int64_t bad_label_index = -1;        // >= 0: that label becomes `bad_label_value`
  std::int32_t bad_label_value = 0;
  hsize_t chunk = 7;                        // samples per chunk
  std::vector<hsize_t> chunk_sample_dims;   // empty: whole samples per chunk
};

/// Writes a data set file with the raw HDF5 C API: uint8 samples by synthetic_pixel, int32
/// labels by synthetic_label, root attributes classes/shape/count.
inline void write_dataset_file(const std::string& path, const RawDataset& d) {
  hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (f < 0) throw std::runtime_error("H5Fcreate " + path);
  hsize_t sample_size = 1;
  for (auto s : d.sample_dims) sample_size *= s;
  if (d.write_samples) {
    std::vector<hsize_t> dims = {static_cast<hsize_t>(d.count)};
    dims.insert(dims.end(), d.sample_dims.begin(), d.sample_dims.end());
    std::vector<hsize_t> chunk = dims;
    chunk[0] = std::min<hsize_t>(d.chunk, dims[0]);
    if (!d.chunk_sample_dims.empty()) std::copy(d.chunk_sample_dims.begin(), d.chunk_sample_dims.end(), chunk.begin() + 1);
    hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data());
    hid_t ds = H5Dcreate2(f, "samples", H5T_STD_U8LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    std::vector<unsigned char> px(static_cast<std::size_t>(d.count) * sample_size);
    for (std::int64_t i = 0; i < d.count; ++i) {
      for (hsize_t e = 0; e < sample_size; ++e) {
        px[static_cast<std::size_t>(i) * sample_size + e] =
            synthetic_pixel(i, static_cast<std::int64_t>(e));
      }
    }
    H5Dwrite(ds, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, px.data());
    H5Dclose(ds);
    H5Pclose(dcpl);
    H5Sclose(space);
  }
  if (d.write_labels) {
    hsize_t n = static_cast<hsize_t>(d.label_count >= 0 ? d.label_count : d.count);
    std::vector<std::int32_t> lb(n);
    for (hsize_t i = 0; i < n; ++i) lb[i] = synthetic_label(static_cast<std::int64_t>(i), d.classes);
    if (d.bad_label_index >= 0) lb[static_cast<std::size_t>(d.bad_label_index)] = d.bad_label_value;
    hid_t space = H5Screate_simple(1, &n, nullptr);
    hid_t ds = H5Dcreate2(f, "labels", H5T_STD_I32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(ds, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, lb.data());
    H5Dclose(ds);
    H5Sclose(space);
  }
  auto attr_i64 = [f](const char* name, const std::vector<std::int64_t>& v, bool scalar) {
    hsize_t n = v.size();
    hid_t space = scalar ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &n, nullptr);
    hid_t a = H5Acreate2(f, name, H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_INT64, v.data());
    H5Aclose(a);
    H5Sclose(space);
  };
  attr_i64("classes", {d.classes}, true);
  attr_i64("count", {d.count}, true);
  std::vector<std::int64_t> shape = d.shape_attr;
  if (shape.empty()) shape.assign(d.sample_dims.begin(), d.sample_dims.end());
  attr_i64("shape", shape, false);
  H5Fclose(f);
}

}  // namespace hpctrain::io::test
