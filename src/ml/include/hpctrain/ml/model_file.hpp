#pragma once
/// @file
/// The HDF5 file a fitted model is written to (`hpctrain ml ... --out MODEL.h5`).
///
/// Layout: f64 datasets (e.g. /centroids K x d, /coefficients d, /standardize_mean and
/// /standardize_std d with --standardize), root attributes `model`
/// (the estimator's name: "kmeans", "linreg"), `format` = "hpctrain-model",
/// `format_version` = 1, `data_checksum` (feature_scaling.hpp), `samples`, and the
/// estimator's scalars (inertia, iterations, intercept, ...).

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace hpctrain::ml {

/// One f64 dataset of a model file.
struct ModelArray {
  std::string name;            ///< absolute, e.g. "/centroids"
  std::vector<hsize_t> dims;   ///< e.g. {K, d}
  std::vector<double> values;  ///< row-major, product of dims
};

/// What a model file holds.
struct ModelFileContents {
  std::string model;
  std::vector<ModelArray> arrays;
  std::vector<std::pair<std::string, double>> real_attributes;
  std::vector<std::pair<std::string, std::int64_t>> int_attributes;
  std::vector<std::pair<std::string, std::string>> string_attributes;  ///< e.g. data_checksum

  /// The real attribute `name`; throws when it is missing.
  double real_attribute(const std::string& name) const;
};

/// Reads a model file written by write_model_file: the `model` attribute, every f64 dataset of
/// the root group (in name order) and the root's numeric attributes. Throws hpctrain::Error
/// naming the file when it is missing, not HDF5, or not an hpctrain model file.
ModelFileContents read_model_file(const std::string& path);

/// The array called `name` of `contents`; throws naming `path` when it is missing.
const ModelArray& model_array(const ModelFileContents& contents, const std::string& name, const std::string& path);

/// Writes `contents` to `path` atomically (io::StagedFile: temporary name, fsync, rename).
/// Serial HDF5: call it on one rank.
void write_model_file(const std::string& path, const ModelFileContents& contents);

}  // namespace hpctrain::ml
