#pragma once
/// @file
/// Conversion of a CSV file (header row, numeric cells) into hpctrain's HDF5 data set format.

#include <cstdint>
#include <string>

namespace hpctrain::io {

struct CsvImportOptions {
  std::string label_column;  ///< header name of the label (or target) column
  /// The column becomes /targets (float64, regression) instead of /labels (int32 in
  /// [0, classes), classes = largest label + 1).
  bool target = false;
  std::int64_t chunk_rows = 4096;  ///< rows buffered and written per HDF5 chunk
};

struct CsvImportResult {
  std::int64_t count = 0, features = 0;
  std::int32_t classes = 0;  ///< 0 with `target`
};

/// Converts `csv_path` into `out_path`: the other columns become /samples (float32, N x F,
/// `scale` 1) with the root attributes import_idx writes (format, format_version, count,
/// shape = [F], classes, layout "NF", source) plus `feature_names`. Streams: memory holds one
/// chunk of rows. Cells are split at commas (no quoting); a cell that is not a finite number
/// is an error naming the line and the column. Written under a temporary name, then renamed
/// (io::StagedFile). Serial HDF5: call it on one rank.
CsvImportResult import_csv(const std::string& csv_path, const std::string& out_path, const CsvImportOptions& options);

}  // namespace hpctrain::io
