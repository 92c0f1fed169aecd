#pragma once
/// @file
/// One rank's contiguous slice of an hpctrain data set (io/dataset.hpp), as f64 rows.
///
/// The fitters read /samples as N x F values (an image N x C x H x W is flattened to
/// F = C*H*W), each stored value times the `scale` attribute, with no normalisation, and the
/// optional /targets (N, float64) of regression data sets. /labels is not needed (regression
/// data has none), which is why this reads the datasets directly rather than through
/// io::DatasetReader.

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

/// Rows [first, first + rows) of a data set, row-major.
struct DatasetSlice {
  std::string path;
  std::int64_t total_samples = 0;       ///< N of the whole file
  std::int64_t features = 0;            ///< F, values per sample
  std::int64_t first = 0;               ///< global index of row 0
  std::int64_t rows = 0;
  std::vector<double> samples;          ///< rows x features, value * scale
  std::vector<double> targets;          ///< rows, when SliceColumns::targets
  std::vector<std::int32_t> labels;     ///< rows, when SliceColumns::labels
  std::int64_t classes = 0;             ///< the root attribute `classes`, when SliceColumns::labels
  std::vector<std::string> feature_names;  ///< empty when the file has none

  const double* row(std::int64_t i) const noexcept {
    return samples.data() + static_cast<std::size_t>(i * features);
  }
  /// "column j" or "column j ('name')".
  std::string column_name(std::int64_t j) const;
};

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
/// the shard holding its start. Every value must be finite: a NaN or Inf is an
/// error naming the sample's global index and the column. /targets, when asked for, must exist
/// (an error saying so otherwise) and be finite too; /labels, when asked for, must exist with
/// the root attribute `classes` >= 2 and every label in [0, classes).
DatasetSlice read_dataset_slice(const std::string& path, const SamplePartition& part, SliceColumns columns);

}  // namespace hpctrain::ml
