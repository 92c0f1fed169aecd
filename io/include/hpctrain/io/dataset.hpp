#pragma once
/// @file
/// hpctrain's HDF5 data set format and its reader.
///
/// Format (version 1; docs/data.md has the full description):
///   /samples  chunked, N x C x H x W (images; C = 1 for Fashion-MNIST) or N x F (feature
///             vectors); uint8 or float32. Attribute `scale` (float64): a stored value v means
///             v * scale (1/255 for uint8 pixels, 1 for float32).
///   /labels   chunked, N, int32 (any integer type is accepted by the reader), in [0, classes).
///   root attributes: `format` = "hpctrain-dataset", `format_version` = 1, `count` = N,
///             `shape` = per-sample dims (e.g. [1, 28, 28]), `classes`, `source`
///             (where the data came from), optional `class_names`.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hpctrain/io/h5.hpp"

namespace hpctrain::io {

/// The element type stored in /samples.
enum class SampleType { uint8, float32 };

/// Name of a SampleType ("uint8", "float32").
const char* to_string(SampleType t) noexcept;

/// The format's fixed names, shared by the writer (import) and the reader.
struct DatasetFormat {
  static constexpr const char* samples = "/samples";
  static constexpr const char* labels = "/labels";
  static constexpr const char* format_name = "hpctrain-dataset";
  static constexpr std::int64_t version = 1;
};

/// What a data set file holds, as validated by DatasetReader.
struct DatasetInfo {
  std::string path;
  std::int64_t count = 0;                  ///< N, the number of samples
  std::vector<std::int64_t> sample_shape;  ///< per-sample dims, e.g. {1, 28, 28} (C, H, W)
  std::int64_t sample_size = 0;            ///< product of sample_shape (784 for 1x28x28)
  std::int32_t classes = 0;                ///< labels lie in [0, classes)
  SampleType stored_type = SampleType::uint8;
  double scale = 1.0;                      ///< stored value * scale = sample value
  std::string source;                      ///< free text: where the data came from
  std::vector<std::string> class_names;    ///< empty when the file has none
};

/// Options of DatasetReader.
struct DatasetReaderOptions {
  /// Normalisation applied after `scale`: x = (v * scale - mean) / stddev. Scalars, one for all
  /// channels (Fashion-MNIST's training-set values are about 0.2860 and 0.3530).
  float mean = 0.0f;
  float stddev = 1.0f;
  /// Read every label once when opening and reject the file if one lies outside
  /// [0, classes) (streams in blocks; memory stays small). Batches are checked either way.
  bool validate_labels = true;
  /// HDF5 chunk-cache size per dataset, used only for compressed /samples (a compressed chunk
  /// must be read and inflated whole). Uncompressed data bypasses the cache: each sample is
  /// read directly from its place in the file.
  std::size_t compressed_chunk_cache_bytes = std::size_t{64} << 20;
  /// Read the rows of an uncompressed file in native byte order with pread at addresses HDF5
  /// gives once at open (one call per run of consecutive samples, no HDF5 call per batch), where
  /// the layout allows it; other files, and `false` here or HPCTRAIN_DATA_READS=hdf5 in the
  /// environment, read through H5Dread. The same values either way (docs/data.md).
  bool direct_reads = true;
};

/// Where training batches come from: the normalised samples of a data set by global index.
/// DatasetReader reads them from the file; InMemoryDataset (in_memory_dataset.hpp) from a copy
/// in memory. Both give the same values.
class SampleSource {
 public:
  virtual ~SampleSource() = default;
  virtual const DatasetInfo& info() const noexcept = 0;
  /// Reads the samples at `indices` (any order; repeats allowed) into `samples`
  /// (indices.size() x sample_size floats, row-major, in the order of `indices`, normalised)
  /// and `labels`. The outputs are resized. Each index must lie in [0, count).
  virtual void read(const std::vector<std::int64_t>& indices, std::vector<float>& samples,
                    std::vector<std::int32_t>& labels) const = 0;
  /// The labels alone of `indices` (resized), each index in [0, count); by default through read().
  virtual void read_labels(const std::vector<std::int64_t>& indices, std::vector<std::int32_t>& labels) const {
    std::vector<float> samples;
    read(indices, samples, labels);
  }
  /// A source whose normalised samples all sit in memory: count x sample_size floats, row-major
  /// by global index, valid while the source lives. read_batch then leaves a batch's samples
  /// where they are (reading their labels alone) and the model's input gathers them itself.
  struct Resident {
    const float* samples = nullptr;
  };
  /// The resident samples, or nothing (the default: samples must be read).
  virtual std::optional<Resident> resident() const noexcept { return std::nullopt; }
};

/// What identifies a data file's contents on disk without reading them: where it lives (device,
/// inode), its size, its modification time and its status-change time (which also moves when
/// the file is rewritten with its timestamps restored, as `cp -p` does).
struct DataFileIdentity {
  std::uint64_t device = 0;
  std::uint64_t inode = 0;
  std::int64_t bytes = 0;
  std::int64_t mtime_ns = 0;
  std::int64_t ctime_ns = 0;
  friend bool operator==(const DataFileIdentity& a, const DataFileIdentity& b) noexcept {
    return a.device == b.device && a.inode == b.inode && a.bytes == b.bytes && a.mtime_ns == b.mtime_ns &&
           a.ctime_ns == b.ctime_ns;
  }
};

/// Reads samples of an hpctrain data set, a file or a sharded directory (dataset_shards.hpp),
/// by global index.
///
/// Every rank opens the file itself, read-only, with HDF5's default (POSIX) file driver, and
/// reads independently. Not MPI-IO: opening with an MPI-IO file access list would make open and
/// close collective over a communicator and tie a background prefetch thread to MPI; reads of a
/// rank's scattered samples are independent anyway, and the file is never written while read.
///
/// Thread safety: all methods may be called from any thread; HDF5 calls are serialised by
/// h5_mutex() (see h5.hpp). `read` is the only call a prefetch thread makes.
class DatasetReader final : public SampleSource {
 public:
  /// A directory with an index.json is a sharded data set: the index is read and checked here, and
  /// each shard file is opened (and validated as below, and against the index) only when a read
  /// first needs one of its samples. Otherwise `path` is one file.
  ///
  /// Opens and validates `path`: the file exists and is HDF5; /samples and /labels exist, are
  /// datasets of the right rank and type, with equal counts; the `shape`, `count` and `classes`
  /// attributes agree with the datasets; labels lie in [0, classes). Failures throw
  /// hpctrain::Error naming the file, the dataset and the reason.
  explicit DatasetReader(std::string path, DatasetReaderOptions options = {});
  ~DatasetReader() override;
  DatasetReader(const DatasetReader&) = delete;
  DatasetReader& operator=(const DatasetReader&) = delete;
  DatasetReader(DatasetReader&&) noexcept;
  DatasetReader& operator=(DatasetReader&&) noexcept;

  const DatasetInfo& info() const noexcept override { return info_; }
  const DatasetReaderOptions& options() const noexcept { return options_; }

  /// Checks the data set against a model: `input_shape` must equal the sample shape, or be
  /// one-dimensional and equal to the number of values per sample (an MLP reading 784 from
  /// 1x28x28), and `classes` must equal the data set's class count. Throws hpctrain::Error
  /// naming the file and both shapes otherwise.
  void require_compatible(const std::vector<std::int64_t>& input_shape,
                          std::int64_t classes) const;

  /// Reads the samples at `indices` (any order; repeats allowed) into `samples`
  /// (indices.size() x sample_size floats, row-major, in the order of `indices`, normalised)
  /// and `labels` (int32). The outputs are resized. Each index must lie in [0, count).
  ///
  /// The indices are sorted and deduplicated; each run of consecutive indices is one hyperslab
  /// read per dataset (measured ~25x faster per sample than one read of an OR'ed multi-block
  /// selection with HDF5 1.10.8); the result is put back into the requested order in memory.
  ///
  /// The file must still be the one opened (DataFileIdentity, checked with stat before and after
  /// the reads): a file truncated, rewritten (`cp`) or replaced (`mv`) under a running job
  /// throws hpctrain::Error naming the file and what changed, instead of yielding other data.
  void read(const std::vector<std::int64_t>& indices, std::vector<float>& samples,
            std::vector<std::int32_t>& labels) const override;

  /// True when batches are read with pread rather than through HDF5 (direct_reads; a sharded
  /// set: false until a shard is open, then its first shard's answer).
  bool reads_directly() const;

  /// How many files this reader has opened: 1 for a data set file; for a sharded set, the shards
  /// a read has needed so far.
  std::size_t open_file_count() const;

 private:
  struct StoredSamples;
  struct Shards;
  struct Direct;
  void plan_direct_reads(const std::string& file_where);
  void read_shards(const std::vector<std::int64_t>& indices, std::vector<float>& samples,
                   std::vector<std::int32_t>& labels) const;
  void close() noexcept;
  void open_file(const std::string& file_where);
  void read_sorted(const std::vector<std::int64_t>& order, StoredSamples& out) const;
  /// Throws naming the file and what changed unless it still has the identity recorded at open.
  void require_unchanged() const;

  std::string path_;
  DatasetReaderOptions options_;
  DatasetInfo info_;
  H5File file_;
  H5Dataset samples_;
  H5Dataset labels_;
  DataFileIdentity identity_;  ///< recorded when the file was opened
  std::unique_ptr<Shards> shards_;  ///< set for a sharded data set (then file_ stays closed)
  std::unique_ptr<Direct> direct_;  ///< set when rows are read with pread (direct_reads)
};

/// The description of a data set file that has no /labels (regression data: /samples and
/// /targets, `classes` 0 or absent): /samples checked as DatasetReader checks it (rank, uint8 or
/// float32, finite scale) and the root attributes format_version, shape, count, source,
/// class_names; info.classes = 0. DatasetReader cannot open such a file (it reads labels).
/// Throws hpctrain::Error naming the file otherwise.
DatasetInfo describe_unlabelled_dataset(const std::string& path);

}  // namespace hpctrain::io
