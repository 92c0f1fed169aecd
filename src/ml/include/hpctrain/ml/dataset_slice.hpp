#pragma once
/// @file
/// One rank's contiguous slice of an hpctrain data set (io/dataset.hpp).
///
/// The fitters see /samples as N x F f64 values (an image N x C x H x W is flattened to
/// F = C*H*W), each stored value times the `scale` attribute, with no normalisation, and the
/// optional /targets (N, float64) of regression data sets. /labels is not needed (regression
/// data has none), which is why this reads the datasets directly rather than through
/// io::DatasetReader.
///
/// Storage: a uint8 file's samples stay uint8 in memory (1 byte a value instead of 8:
/// Fashion-MNIST's 47 MB rather than 376 MB), and the fitters widen a few rows at a time into
/// a small buffer of their own (rows_f64, widen_rows) while the rows are in cache; float32 and
/// float64 files are held as the f64 values. A widened value is double(v) * scale, then
/// (x - mean_j) / std_j when standardised: the same two roundings, in the same order, as
/// scaling the doubles at load and standardising them in place, so every result has the same
/// bits either way.

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "hpctrain/ml/sample_partition.hpp"

namespace hpctrain::ml {

/// The fixed names the fitters read beside io::DatasetFormat's.
struct RegressionFormat {
  static constexpr const char* targets = "/targets";  ///< N, float64
  static constexpr const char* feature_names = "feature_names";  ///< optional root attribute
};

/// Rows a fitter widens at a time (DatasetSlice::rows_f64) where the grouping of rows does not
/// change any bits: 64 x d doubles stay in the core's L2 (400 KB at d = 784).
constexpr std::int64_t kWidenBlockRows = 64;

/// How a slice holds its samples (see the file comment).
enum class SliceStorage {
  f64,    ///< `samples`: value * scale (float32/float64 files, or after widen_all)
  uint8,  ///< `stored`: the file's bytes; widened on demand with `scale` and the standardisation
};

/// Rows [first, first + rows) of a data set, row-major.
struct DatasetSlice {
  std::string path;
  std::int64_t total_samples = 0;       ///< N of the whole file
  std::int64_t features = 0;            ///< F, values per sample
  std::int64_t first = 0;               ///< global index of row 0
  std::int64_t rows = 0;
  SliceStorage storage = SliceStorage::f64;
  std::vector<double> samples;          ///< rows x features, value * scale (SliceStorage::f64)
  std::vector<std::uint8_t> stored;     ///< rows x features as stored (SliceStorage::uint8)
  double scale = 1.0;                   ///< of `stored` (applied already in `samples`)
  /// The standardisation of `stored` rows, applied when widened (empty: none); see
  /// apply_standardization (feature_scaling.hpp).
  std::vector<double> standardize_mean, standardize_std;
  std::vector<double> targets;          ///< rows, when SliceColumns::targets
  std::vector<std::int32_t> labels;     ///< rows, when SliceColumns::labels
  std::int64_t classes = 0;             ///< the root attribute `classes`, when SliceColumns::labels
  std::vector<std::string> feature_names;  ///< empty when the file has none

  /// Row i as f64; SliceStorage::f64 only (others: rows_f64 or widen_rows, or widen_all first).
  const double* row(std::int64_t i) const noexcept {
    return samples.data() + static_cast<std::size_t>(i * features);
  }
  /// Rows [first, first + count) as the fitters' f64 values, row-major: a pointer into
  /// `samples` (SliceStorage::f64, no copy) or to `buffer` (count x features doubles, owned by
  /// the caller) after widening into it.
  const double* rows_f64(std::int64_t first, std::int64_t count, double* buffer) const;
  /// Rows [first, first + count) as f64 values into `out` (count x features), always a copy.
  void widen_rows(std::int64_t first, std::int64_t count, double* out) const;
  /// The same rows as float: each the float nearest to its f64 value (logreg --products f32).
  void widen_rows(std::int64_t first, std::int64_t count, float* out) const;
  /// Makes the slice SliceStorage::f64 (the widened rows, standardisation included); for
  /// the code that reads row() everywhere (linreg, predict).
  void widen_all();
  /// "column j" or "column j ('name')".
  std::string column_name(std::int64_t j) const;
};

/// Calls f(x, at, n) for the rows [first, first + count) of `data`, in order, `block_rows` at a
/// time (the last block shorter): x holds the n rows from row `at` as f64 (DatasetSlice::rows_f64:
/// into `data` itself, or widened into `buffer`, which this sizes, for a uint8 slice).
template <typename F>
void for_each_f64_block(const DatasetSlice& data, std::int64_t first, std::int64_t count, std::int64_t block_rows,
                        std::vector<double>& buffer, F&& f) {
  if (data.storage != SliceStorage::f64) buffer.resize(static_cast<std::size_t>(block_rows * data.features));
  for (std::int64_t at = first; at < first + count; at += block_rows) {
    const std::int64_t n = std::min(block_rows, first + count - at);
    f(data.rows_f64(at, n, buffer.data()), at, n);
  }
}

/// Number of samples N of the data set at `path`, a file (validated format) or a sharded
/// directory (its index's count; io/dataset_shards.hpp); throws hpctrain::Error naming the file
/// otherwise.
std::int64_t dataset_sample_count(const std::string& path);

/// Which per-sample datasets besides /samples a fitter reads.
struct SliceColumns {
  bool targets = false;  ///< /targets (regression)
  bool labels = false;   ///< /labels and the `classes` attribute (classification)
  /// /labels only when present with `classes` >= 1 (k-means' purity); absent is not an error.
  bool labels_if_present = false;
};

/// Reads this rank's slice `part` of `path`, a data set file or a sharded directory. A directory:
/// only the shards overlapping the slice are opened (io::shards_overlapping), each checked against
/// the index (io::require_shard_matches, a missing one refused by name) before its rows are read,
/// and the pieces concatenated in order: the same values as the file's (`path` is the directory;
/// feature_names and classes come from the shards). A rank without samples reads the metadata of
/// the shard holding its start. A uint8 /samples is kept as stored (SliceStorage::uint8; a
/// sharded directory's shards all are, the index says so). Every value must be finite: a NaN
/// or Inf (of a stored value, or of a uint8 value times `scale`) is an error naming the
/// sample's global index and the column. /targets, when asked for, must exist
/// (an error saying so otherwise) and be finite too; /labels, when asked for, must exist with
/// the root attribute `classes` >= 2 and every label in [0, classes).
DatasetSlice read_dataset_slice(const std::string& path, const SamplePartition& part, SliceColumns columns);

/// A rank's share of a data set and the rows it holds.
struct RankSlice {
  SamplePartition part;
  DatasetSlice data;
};

/// partition_samples over the data set's N samples for `rank` of `ranks`, then its rows as
/// read_dataset_slice reads them; a sharded directory's index is read once for both.
RankSlice read_rank_slice(const std::string& path, int rank, int ranks, SliceColumns columns);

}  // namespace hpctrain::ml
