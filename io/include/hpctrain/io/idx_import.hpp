#pragma once
/// @file
/// Conversion of IDX files (the MNIST / Fashion-MNIST format, gzip-compressed or plain) into
/// hpctrain's HDF5 data set format (see dataset.hpp and docs/data.md).

#include <cstdint>
#include <string>
#include <vector>

#include "hpctrain/io/dataset.hpp"

namespace hpctrain::io {

/// Options of import_idx.
struct IdxImportOptions {
  /// Element type of /samples: uint8 keeps the pixels as they are (scale 1/255); float32 stores
  /// pixel / 255 (four times the size, no conversion when read).
  SampleType sample_type = SampleType::uint8;
  /// gzip level for /samples and /labels, 0 (default) = uncompressed. Compressed data is read a
  /// whole chunk at a time, which makes random access slower; use it for storage, not training.
  int compression_level = 0;
  /// Samples per chunk of /samples; 0 = automatic (about 1 MiB per chunk uncompressed, 64 KiB
  /// compressed, so that random reads inflate little).
  std::int64_t chunk_samples = 0;
  /// Import only the first `limit` samples (0 = all): small data sets for tests and trials.
  std::int64_t limit = 0;
  /// Number of classes; 0 = the largest label + 1. When given, a label >= classes is an error.
  std::int32_t classes = 0;
  /// Stored as the `class_names` attribute when not empty (then its size must equal classes).
  std::vector<std::string> class_names;

  /// Defaults for Fashion-MNIST: 10 classes and their names.
  static IdxImportOptions fashion_mnist();
};

/// What import_idx wrote.
struct IdxImportResult {
  std::int64_t count = 0;
  std::vector<std::int64_t> sample_shape;
  std::int32_t classes = 0;
};

/// Converts an IDX image file and its IDX label file into the data set `out_path`.
///
/// Images: IDX unsigned-byte (type 0x08) with 3 dims (N, H, W), stored as N x 1 x H x W, or 2
/// dims (N, F), stored as N x F. Labels: IDX unsigned-byte with 1 dim (N). Both files are read
/// with zlib, so gzip and plain files both work, and are streamed a chunk at a time (memory is
/// bounded by one chunk plus the labels). Every header field is checked: magic (two zero bytes),
/// type byte, number of dims, equal counts, and the data length (truncated files and trailing
/// bytes are errors). Errors throw hpctrain::Error naming the file and the reason.
///
/// The file is written under a temporary name in the same directory
/// (".<name>.tmp-<pid>"), flushed to disk, then renamed to `out_path` (replacing any old file),
/// so a crash never leaves a partial file under the final name; on error the temporary file is
/// removed. Serial HDF5 calls: call it from one rank only.
IdxImportResult import_idx(const std::string& images_path, const std::string& labels_path,
                           const std::string& out_path, const IdxImportOptions& options = {});

/// The ten Fashion-MNIST class names, in label order ("T-shirt/top" ... "Ankle boot").
const std::vector<std::string>& fashion_mnist_class_names();

/// Where Debian's `dataset-fashion-mnist` package puts the IDX files.
inline constexpr const char* kFashionMnistDebianDir = "/usr/share/datasets/fashion-mnist";

/// The IDX file pair of a Fashion-MNIST split ("train" or "test") inside `dir`.
struct IdxFilePair {
  std::string images;
  std::string labels;
};
IdxFilePair fashion_mnist_idx_files(const std::string& split,
                                    const std::string& dir = kFashionMnistDebianDir);

}  // namespace hpctrain::io
