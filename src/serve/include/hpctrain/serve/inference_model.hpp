#pragma once
/// @file
/// InferenceModel: a model read from a checkpoint for forward passes only (predict, serve).

#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "hpctrain/core/tensor.hpp"
#include "hpctrain/models/sequential.hpp"
#include "hpctrain/serve/checkpoint_source.hpp"

namespace hpctrain::serve {

/// The input normalisation the trainer applied: x = u * (1 / std) - mean / std for an input
/// value u (stored value x the data set's `scale`), the same float operations the data set
/// reader does, so a float32 input gives the trainer's bits.
struct InputNormalization {
  float mean = 0.2860f;  ///< the trainer's defaults (--normalize-mean/std), used for checkpoints
  float std = 0.3530f;   ///< written before the checkpoint recorded them
  /// From a checkpoint's metadata: its `input_normalization` object, else the defaults above.
  static InputNormalization from_metadata(const nlohmann::json& metadata);
};

/// A model built from a checkpoint's config, its parameters read from the checkpoint's shards
/// (any writer rank count) and checked against the recorded parameter checksum; the gradient
/// buffer is released (forward only) and dropout is off (train = false).
///
/// Not thread-safe: one thread uses a given InferenceModel at a time.
class InferenceModel {
 public:
  /// Reads `source` (resolve_checkpoint's result). Local: every rank that calls it reads what it
  /// needs. Throws hpctrain::Error naming the step directory when the parameters read back do
  /// not hash to the recorded checksum or the config does not build.
  explicit InferenceModel(const CheckpointSource& source);

  const CheckpointSource& source() const noexcept { return source_; }
  const nlohmann::json& config() const noexcept { return config_; }
  const InputNormalization& normalization() const noexcept { return normalization_; }
  std::int64_t input_size() const noexcept { return input_size_; }  ///< values per instance
  std::int64_t classes() const noexcept { return classes_; }
  const core::Shape& input_shape() const { return model_->input_shape(); }

  /// Forward pass of `rows` already normalised instances (`x`: rows x input_size(), row-major):
  /// writes `probabilities` (rows x classes(), softmax computed in float64 and rounded) and
  /// `predictions` (the index of the largest logit, the first one on ties). The bits of a row
  /// depend on the row, the batch's size and the compute library's threads, not on other rows'
  /// values.
  void predict_normalized(const float* x, std::int64_t rows, float* probabilities, std::int32_t* predictions);

  /// The same for raw instances u (in [0, 1] for Fashion-MNIST): normalised first.
  void predict_raw(const float* u, std::int64_t rows, float* probabilities, std::int32_t* predictions);

 private:
  CheckpointSource source_;
  nlohmann::json config_;
  InputNormalization normalization_;
  std::unique_ptr<models::Sequential<float>> model_;
  std::int64_t input_size_ = 0, classes_ = 0;
  core::Tensor<float> input_;
  std::vector<float> normalized_;
};

}  // namespace hpctrain::serve
