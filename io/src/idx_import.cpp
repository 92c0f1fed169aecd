#include "hpctrain/io/idx_import.hpp"
#include "hpctrain/io/durable_file.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <system_error>

#include <fmt/format.h>

namespace hpctrain::io {

namespace fs = std::filesystem;

namespace {

// IDX type byte for unsigned bytes, the only element type MNIST-style data sets use.
constexpr int kIdxUnsignedByte = 0x08;
// Deflate expands at most 1032:1 (a 258-byte match per 2 bits), so a gzip file of B bytes
// decompresses to at most 1032 B: the bound that catches a header claiming absurd sizes.
constexpr std::uint64_t kMaxDeflateRatio = 1032;

const char* idx_type_name(int t) {
  switch (t) {
    case 0x08: return "unsigned byte";
    case 0x09: return "signed byte";
    case 0x0B: return "int16";
    case 0x0C: return "int32";
    case 0x0D: return "float32";
    case 0x0E: return "float64";
    default: return "not an IDX type";
  }
}

/// gzclose as a deleter: the zlib stream (and its file descriptor) is closed however the
/// IdxFile ends, including a constructor that throws on a bad header.
struct GzClose {
  void operator()(gzFile f) const noexcept { gzclose(f); }
};

/// One IDX file opened through zlib (gzip or plain), header parsed.
class IdxFile {
 public:
  IdxFile(std::string path, const char* role) : path_(std::move(path)), role_(role) {
    std::error_code ec;
    if (!fs::exists(path_, ec)) fail("no such file");
    if (fs::is_directory(path_, ec)) fail("is a directory, not a file");
    const auto size = fs::file_size(path_, ec);
    file_bytes_ = ec ? UINT64_MAX : static_cast<std::uint64_t>(size);  // not a regular file: no bound
    gz_.reset(gzopen(path_.c_str(), "rb"));
    if (!gz_) fail(fmt::format("cannot open: {}", std::strerror(errno)));
    unsigned char magic[4];
    read_exact(magic, 4, "the 4-byte magic number");
    if (magic[0] != 0 || magic[1] != 0) {
      fail(fmt::format("wrong magic number 0x{:02x}{:02x}{:02x}{:02x}: not an IDX file (an IDX "
                       "file starts with two zero bytes, a type byte and a dimension count)",
                       magic[0], magic[1], magic[2], magic[3]));
    }
    type_ = magic[2];
    int ndims = magic[3];
    if (ndims < 1) fail("IDX header has 0 dimensions");
    for (int i = 0; i < ndims; ++i) {
      unsigned char b[4];
      read_exact(b, 4, "the dimension sizes");
      std::uint32_t d = (std::uint32_t{b[0]} << 24) | (std::uint32_t{b[1]} << 16) |
                        (std::uint32_t{b[2]} << 8) | std::uint32_t{b[3]};
      if (d > static_cast<std::uint32_t>(INT32_MAX)) fail(fmt::format("dimension {} is {}", i, d));
      dims_.push_back(static_cast<std::int64_t>(d));
    }
  }
  IdxFile(const IdxFile&) = delete;
  IdxFile& operator=(const IdxFile&) = delete;

  const std::string& path() const { return path_; }
  int type() const { return type_; }
  const std::vector<std::int64_t>& dims() const { return dims_; }

  void require_type(int type) const {
    if (type_ != type) {
      fail(fmt::format("IDX type byte 0x{:02x} ({}), expected 0x{:02x} ({})", type_,
                       idx_type_name(type_), type, idx_type_name(type)));
    }
  }

  /// Refuses a header that describes `n` x `size` bytes of `what` when the file cannot hold them,
  /// before anything that size is allocated: a plain file holds at most its own size, a gzip
  /// file at most 1032 times it (deflate's largest expansion).
  void require_room_for(std::int64_t n, std::int64_t size, const std::string& what) const {
    const std::uint64_t room =
        gzdirect(gz_.get()) ? file_bytes_
        : file_bytes_ > UINT64_MAX / kMaxDeflateRatio ? UINT64_MAX : file_bytes_ * kMaxDeflateRatio;
    if (n > 0 && size > 0 &&
        static_cast<std::uint64_t>(n) > room / static_cast<std::uint64_t>(size)) {
      fail(fmt::format("truncated or a wrong header: it describes {} x {} bytes of {}, more than "
                       "a {}-byte {} file can hold",
                       n, size, what, file_bytes_, gzdirect(gz_.get()) ? "plain" : "gzip"));
    }
  }

  /// Reads exactly n bytes; a short read is a truncated file.
  void read_exact(void* dst, std::size_t n, const std::string& what) {
    auto* p = static_cast<unsigned char*>(dst);
    std::size_t done = 0;
    while (done < n) {
      unsigned want = static_cast<unsigned>(std::min<std::size_t>(n - done, 1u << 30));
      int got = gzread(gz_.get(), p + done, want);
      if (got < 0) {
        int err = 0;
        const char* msg = gzerror(gz_.get(), &err);
        fail(fmt::format("read error in {}: {}", what, msg ? msg : "unknown zlib error"));
      }
      if (got == 0) {
        fail(fmt::format("truncated: the file ends {} bytes into {} ({} bytes expected there)",
                         done, what, n));
      }
      done += static_cast<std::size_t>(got);
    }
    consumed_ += n;
  }

  /// After the last element: anything left is an error (a wrong header or a concatenation).
  void require_end() {
    unsigned char extra;
    int got = gzread(gz_.get(), &extra, 1);
    if (got > 0) {
      fail(fmt::format("trailing data after the {} bytes the header describes", consumed_));
    }
    if (got < 0) {
      int err = 0;
      const char* msg = gzerror(gz_.get(), &err);
      fail(fmt::format("read error at the end of the file: {}", msg ? msg : "unknown"));
    }
  }

  [[noreturn]] void fail(const std::string& reason) const {
    HPCTRAIN_FAIL(fmt::format("import-idx: {} file '{}': {}", role_, path_, reason));
  }

 private:
  std::string path_;
  const char* role_;
  std::unique_ptr<gzFile_s, GzClose> gz_;
  int type_ = 0;
  std::vector<std::int64_t> dims_;
  std::size_t consumed_ = 0;
  std::uint64_t file_bytes_ = UINT64_MAX;
};

/// Removes the file at `path` when destroyed, unless committed.
struct TemporaryFile {
  std::string path;
  bool committed = false;
  ~TemporaryFile() {
    if (!committed) {
      std::error_code ec;
      fs::remove(path, ec);
    }
  }
};

H5Dataset create_chunked(hid_t file, const char* name, hid_t type, const std::vector<hsize_t>& dims,
                         const std::vector<hsize_t>& chunk, int compression_level,
                         const std::string& where) {
  H5Dataspace space(HPCTRAIN_CHECK_H5(
      H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), where));
  H5PropList dcpl(HPCTRAIN_CHECK_H5(H5Pcreate(H5P_DATASET_CREATE), where));
  HPCTRAIN_CHECK_H5(H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data()), where);
  if (compression_level > 0) {
    HPCTRAIN_CHECK_H5(H5Pset_deflate(dcpl.get(), static_cast<unsigned>(compression_level)), where);
  }
  return H5Dataset(HPCTRAIN_CHECK_H5(
      H5Dcreate2(file, name, type, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
      where + ": create " + name));
}

void write_rows(hid_t dset, hid_t mem_type, hsize_t first, hsize_t rows, hsize_t row_size,
                const void* data, const std::string& where) {
  H5Dataspace fspace(HPCTRAIN_CHECK_H5(H5Dget_space(dset), where));
  std::vector<hsize_t> dims = h5_dims(fspace.get());
  std::vector<hsize_t> start(dims.size(), 0), count = dims;
  start[0] = first;
  count[0] = rows;
  HPCTRAIN_CHECK_H5(H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, start.data(), nullptr,
                                        count.data(), nullptr),
                    where);
  hsize_t mdims[2] = {rows, row_size};
  H5Dataspace mspace(HPCTRAIN_CHECK_H5(H5Screate_simple(2, mdims, nullptr), where));
  HPCTRAIN_CHECK_H5(H5Dwrite(dset, mem_type, mspace.get(), fspace.get(), H5P_DEFAULT, data),
                    where);
}

std::string base_name(const std::string& path) { return fs::path(path).filename().string(); }

/// The option values import_idx accepts.
void check_import_options(const IdxImportOptions& options) {
  HPCTRAIN_REQUIRE(options.compression_level >= 0 && options.compression_level <= 9,
                   fmt::format("import-idx: compression level {} is not in 0..9",
                               options.compression_level));
  HPCTRAIN_REQUIRE(options.limit >= 0 && options.chunk_samples >= 0 && options.classes >= 0,
                   "import-idx: limit, chunk_samples and classes must not be negative");
}

/// The whole label file (1 byte per sample), header and length checked.
std::vector<std::uint8_t> read_idx_labels(const std::string& labels_path) {
  IdxFile labels_file(labels_path, "labels");
  labels_file.require_type(kIdxUnsignedByte);
  if (labels_file.dims().size() != 1) {
    labels_file.fail(fmt::format("has {} dimensions; a label file has 1 (the sample count)",
                                 labels_file.dims().size()));
  }
  const std::int64_t n_labels = labels_file.dims()[0];
  labels_file.require_room_for(n_labels, 1, "labels");
  std::vector<std::uint8_t> raw_labels(static_cast<std::size_t>(n_labels));
  labels_file.read_exact(raw_labels.data(), raw_labels.size(), "the labels");
  labels_file.require_end();
  return raw_labels;
}

/// The shape of what import_idx writes.
struct ImportShape {
  std::int64_t n_images = 0;                 ///< samples in the images file
  std::int64_t count = 0;                    ///< samples imported (options.limit)
  std::vector<std::int64_t> sample_shape;    ///< {1, H, W} or {F}
  std::int64_t sample_size = 0;              ///< values per sample
};

/// The images file's type, dimensions and sample count against the labels.
ImportShape check_images_header(const IdxFile& images_file, std::int64_t n_labels,
                                const std::string& labels_path, const IdxImportOptions& options) {
  const std::string& images_path = images_file.path();
  images_file.require_type(kIdxUnsignedByte);
  const auto& idims = images_file.dims();
  if (idims.size() != 2 && idims.size() != 3) {
    images_file.fail(fmt::format("has {} dimensions; expected 3 (count, rows, columns) or 2 "
                                 "(count, features)",
                                 idims.size()));
  }
  ImportShape shape;
  shape.n_images = idims[0];
  if (shape.n_images != n_labels) {
    HPCTRAIN_FAIL(fmt::format("import-idx: images file '{}' holds {} samples but labels file "
                              "'{}' holds {} labels",
                              images_path, shape.n_images, labels_path, n_labels));
  }
  if (idims.size() == 3) {
    shape.sample_shape = {1, idims[1], idims[2]};  // N x C x H x W with C = 1
  } else {
    shape.sample_shape = {idims[1]};
  }
  shape.sample_size = 1;
  for (auto d : shape.sample_shape) shape.sample_size *= d;
  HPCTRAIN_REQUIRE(shape.sample_size > 0, fmt::format("import-idx: images file '{}': a sample has "
                                                      "0 values",
                                                      images_path));
  shape.count = options.limit > 0 ? std::min(options.limit, shape.n_images) : shape.n_images;
  HPCTRAIN_REQUIRE(shape.count > 0, fmt::format("import-idx: images file '{}' holds no samples",
                                                images_path));
  images_file.require_room_for(shape.count, shape.sample_size, "pixels");
  return shape;
}

/// The number of classes: options.classes, else the largest of the first `count` labels + 1;
/// every label must be below it and the class names (if any) must match it.
std::int32_t check_labels(const std::vector<std::uint8_t>& raw_labels, std::int64_t count,
                          const std::string& labels_path, const IdxImportOptions& options) {
  std::int32_t max_label = 0;
  for (std::int64_t i = 0; i < count; ++i) {
    max_label = std::max<std::int32_t>(max_label, raw_labels[static_cast<std::size_t>(i)]);
  }
  std::int32_t classes = options.classes > 0 ? options.classes : max_label + 1;
  if (max_label >= classes) {
    auto it = std::find_if(raw_labels.begin(), raw_labels.begin() + count,
                           [&](std::uint8_t l) { return l >= classes; });
    HPCTRAIN_FAIL(fmt::format("import-idx: labels file '{}': label {} at index {} is outside "
                              "[0, {}) (classes = {})",
                              labels_path, *it, it - raw_labels.begin(), classes, classes));
  }
  if (!options.class_names.empty() &&
      options.class_names.size() != static_cast<std::size_t>(classes)) {
    HPCTRAIN_FAIL(fmt::format("import-idx: {} class names given for {} classes",
                              options.class_names.size(), classes));
  }
  return classes;
}

/// Samples per chunk of /samples: options.chunk_samples, else ~1 MiB (64 KiB compressed), then
/// spread evenly so the last chunk is not mostly empty.
std::int64_t samples_per_chunk(const ImportShape& shape, std::size_t elem_bytes,
                               const IdxImportOptions& options) {
  std::int64_t chunk = options.chunk_samples;
  if (chunk == 0) {
    // ~1 MiB chunks are efficient for HDF5's metadata and sequential reads; compressed chunks
    // are inflated whole on every random access, so keep those small.
    const std::int64_t target = options.compression_level > 0 ? (64 << 10) : (1 << 20);
    chunk = std::max<std::int64_t>(1, target / (shape.sample_size * static_cast<std::int64_t>(elem_bytes)));
  }
  chunk = std::min(chunk, shape.count);
  const std::int64_t nchunks = (shape.count + chunk - 1) / chunk;
  return (shape.count + nchunks - 1) / nchunks;
}

/// /samples, streamed from the images file one chunk at a time.
void write_samples(hid_t file, IdxFile& images_file, const ImportShape& shape,
                   const IdxImportOptions& options, const std::string& where) {
  const bool as_float = options.sample_type == SampleType::float32;
  const std::int64_t chunk = samples_per_chunk(shape, as_float ? 4 : 1, options);
  const std::int64_t count = shape.count, sample_size = shape.sample_size;
  std::vector<hsize_t> sdims = {static_cast<hsize_t>(count)};
  for (auto d : shape.sample_shape) sdims.push_back(static_cast<hsize_t>(d));
  std::vector<hsize_t> schunk = sdims;
  schunk[0] = static_cast<hsize_t>(chunk);
  H5Dataset samples = create_chunked(file, DatasetFormat::samples,
                                     as_float ? H5T_IEEE_F32LE : H5T_STD_U8LE, sdims, schunk,
                                     options.compression_level, where);

  std::vector<std::uint8_t> pixels(static_cast<std::size_t>(chunk * sample_size));
  std::vector<float> floats(as_float ? pixels.size() : 0);
  for (std::int64_t first = 0; first < count; first += chunk) {
    const std::int64_t rows = std::min(chunk, count - first);
    const std::size_t bytes = static_cast<std::size_t>(rows * sample_size);
    images_file.read_exact(pixels.data(), bytes,
                           fmt::format("the pixels of samples {}..{}", first, first + rows - 1));
    if (as_float) {
      for (std::size_t i = 0; i < bytes; ++i) floats[i] = static_cast<float>(pixels[i]) / 255.0f;
      write_rows(samples.get(), H5T_NATIVE_FLOAT, static_cast<hsize_t>(first),
                 static_cast<hsize_t>(rows), static_cast<hsize_t>(sample_size), floats.data(),
                 where + ": write /samples");
    } else {
      write_rows(samples.get(), H5T_NATIVE_UINT8, static_cast<hsize_t>(first),
                 static_cast<hsize_t>(rows), static_cast<hsize_t>(sample_size), pixels.data(),
                 where + ": write /samples");
    }
  }
  if (count == shape.n_images) images_file.require_end();
  h5_write_attribute(samples.get(), "scale", as_float ? 1.0 : 1.0 / 255.0);
}

/// /labels (the first `count`, as int32) and the data set's attributes.
void write_labels_and_attributes(hid_t file, const std::vector<std::uint8_t>& raw_labels,
                                 const ImportShape& shape, std::int32_t classes,
                                 const std::string& source, const IdxImportOptions& options,
                                 const std::string& where) {
  const std::int64_t count = shape.count;
  std::vector<std::int32_t> labels(raw_labels.begin(), raw_labels.begin() + count);
  std::int64_t label_chunk = std::min<std::int64_t>(count, 1 << 16);
  H5Dataset labels_ds =
      create_chunked(file, DatasetFormat::labels, H5T_STD_I32LE,
                     {static_cast<hsize_t>(count)}, {static_cast<hsize_t>(label_chunk)},
                     options.compression_level, where);
  HPCTRAIN_CHECK_H5(H5Dwrite(labels_ds.get(), H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                             labels.data()),
                    where + ": write /labels");

  h5_write_attribute(file, "format", std::string(DatasetFormat::format_name));
  h5_write_attribute(file, "format_version", DatasetFormat::version);
  h5_write_attribute(file, "count", count);
  h5_write_attribute(file, "shape", shape.sample_shape);
  h5_write_attribute(file, "classes", std::int64_t{classes});
  h5_write_attribute(file, "layout", std::string(shape.sample_shape.size() == 3 ? "NCHW" : "NF"));
  h5_write_attribute(file, "source", source);
  if (!options.class_names.empty()) h5_write_attribute(file, "class_names", options.class_names);
}

/// The data set, written under a temporary name in the output's directory, flushed to disk,
/// then renamed to `out_path`.
void write_dataset(IdxFile& images_file, const std::string& labels_path,
                   const std::vector<std::uint8_t>& raw_labels, const ImportShape& shape,
                   std::int32_t classes, const std::string& out_path,
                   const IdxImportOptions& options) {
  const fs::path out(out_path);
  fs::path dir = out.has_parent_path() ? out.parent_path() : fs::path(".");
  std::error_code ec;
  HPCTRAIN_REQUIRE(fs::is_directory(dir, ec),
                   fmt::format("import-idx: output directory '{}' does not exist", dir.string()));
  HPCTRAIN_REQUIRE(!fs::is_directory(out, ec),
                   fmt::format("import-idx: output '{}' is a directory", out_path));
  TemporaryFile tmp{(dir / fmt::format(".{}.tmp-{}", out.filename().string(), ::getpid()))
                        .string()};
  const std::string where = fmt::format("import-idx: write '{}'", tmp.path);
  std::string source = fmt::format("IDX images={} labels={}", base_name(images_file.path()),
                                   base_name(labels_path));
  if (shape.count < shape.n_images) {
    source += fmt::format(" (first {} of {} samples)", shape.count, shape.n_images);
  }

  H5Lock lock;
  {
    H5File file(HPCTRAIN_CHECK_H5(H5Fcreate(tmp.path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT,
                                            H5P_DEFAULT),
                                  where + ": create file"));
    write_samples(file.get(), images_file, shape, options, where);
    write_labels_and_attributes(file.get(), raw_labels, shape, classes, source, options, where);
    HPCTRAIN_CHECK_H5(H5Fflush(file.get(), H5F_SCOPE_GLOBAL), where + ": flush");
    file.reset();
  }
  fsync_path(tmp.path, false);
  fs::rename(tmp.path, out, ec);
  HPCTRAIN_REQUIRE(!ec, fmt::format("import-idx: rename '{}' to '{}': {}", tmp.path, out_path,
                                    ec.message()));
  tmp.committed = true;
  fsync_path(dir.string(), true);
}

}  // namespace

IdxImportOptions IdxImportOptions::fashion_mnist() {
  IdxImportOptions o;
  o.classes = 10;
  o.class_names = fashion_mnist_class_names();
  return o;
}

const std::vector<std::string>& fashion_mnist_class_names() {
  static const std::vector<std::string> names = {"T-shirt/top", "Trouser", "Pullover", "Dress",
                                                 "Coat",        "Sandal",  "Shirt",    "Sneaker",
                                                 "Bag",         "Ankle boot"};
  return names;
}

IdxFilePair fashion_mnist_idx_files(const std::string& split, const std::string& dir) {
  HPCTRAIN_REQUIRE(split == "train" || split == "test",
                   "Fashion-MNIST split must be 'train' or 'test', not '" + split + "'");
  std::string prefix = split == "train" ? "train" : "t10k";
  return {(fs::path(dir) / (prefix + "-images-idx3-ubyte.gz")).string(),
          (fs::path(dir) / (prefix + "-labels-idx1-ubyte.gz")).string()};
}

IdxImportResult import_idx(const std::string& images_path, const std::string& labels_path,
                           const std::string& out_path, const IdxImportOptions& options) {
  check_import_options(options);
  const std::vector<std::uint8_t> raw_labels = read_idx_labels(labels_path);
  const std::int64_t n_labels = static_cast<std::int64_t>(raw_labels.size());

  // Images: header now, data streamed by write_dataset.
  IdxFile images_file(images_path, "images");
  const ImportShape shape = check_images_header(images_file, n_labels, labels_path, options);
  const std::int32_t classes = check_labels(raw_labels, shape.count, labels_path, options);
  write_dataset(images_file, labels_path, raw_labels, shape, classes, out_path, options);
  return {shape.count, shape.sample_shape, classes};
}

}  // namespace hpctrain::io
