#pragma once
/// @file
/// `hpctrain ml predict`: applies a fitted model file (model_file.hpp) to a data set.
///
/// Per model: kmeans -> the nearest centroid (int32; ties to the lowest index, as the fit
/// assigns); linreg -> X w + b (f64); logreg -> the most probable class (int32; ties to the
/// lowest index) and the class probabilities. Each rank predicts its slice of the samples sum
/// block by sum block (sample_partition.hpp), so every row is computed by the same calls at any
/// rank count and the output file has the same bytes at P = 1, 2, 3, ...
///
/// Output file: /predictions (N, int32 for kmeans and logreg, float64 for linreg); for logreg
/// also /probabilities (N x classes, float32, as `hpctrain predict` writes them); root attributes
/// `format` = "hpctrain-predictions", `model`, `model_file`, `data`, `count`.

#include <cstdint>
#include <string>
#include <vector>

#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/ml/dataset_slice.hpp"
#include "hpctrain/ml/model_file.hpp"

namespace hpctrain::ml {

/// One rank's predictions.
struct Predictions {
  std::string model;                 ///< kmeans | linreg | logreg
  std::int64_t rows = 0;
  std::vector<std::int32_t> labels;  ///< kmeans, logreg: rows
  std::vector<double> values;        ///< linreg: rows
  std::int64_t classes = 0;          ///< logreg: columns of `probabilities`
  std::vector<double> probabilities;  ///< logreg: rows x classes
};

/// Predictions for the rows of `data` (read without labels or targets), widened to f64 rows
/// first (DatasetSlice::widen_all). A model fitted with --standardize (it holds
/// /standardize_mean and /standardize_std) standardises `data` in place first. Throws hpctrain::Error when the model's feature count differs from the data's (both
/// files named) or the model is unknown.
Predictions predict_slice(const ModelFileContents& model, const std::string& model_path, DatasetSlice& data);

/// Where a prediction file's rows came from (its attributes).
struct PredictionProvenance {
  std::string model_path, data_path;
};

/// Collective: gathers every rank's predictions to rank 0 in rank order (= global sample order)
/// and writes them there to `path` atomically (temporary name, fsync, rename).
void write_predictions(coll::Communicator& comm, const Predictions& local, const std::string& path,
                       const PredictionProvenance& provenance);

}  // namespace hpctrain::ml
