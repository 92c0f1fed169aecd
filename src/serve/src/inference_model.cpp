#include "hpctrain/serve/inference_model.hpp"

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include "hpctrain/base/error.hpp"
#include "hpctrain/io/checkpoint.hpp"
#include "hpctrain/models/registry.hpp"
#include "hpctrain/train/trainer.hpp"

namespace hpctrain::serve {

InputNormalization InputNormalization::from_metadata(const nlohmann::json& metadata) {
  InputNormalization n;
  if (metadata.contains("input_normalization")) {
    const nlohmann::json& j = metadata.at("input_normalization");
    n.mean = j.at("mean").get<float>();
    n.std = j.at("std").get<float>();
  }
  return n;
}

InferenceModel::InferenceModel(const CheckpointSource& source) : source_(source) {
  const nlohmann::json meta = io::read_manifest(source.step_dir).at("metadata");
  config_ = meta.at("model");
  normalization_ = InputNormalization::from_metadata(meta);
  HPCTRAIN_REQUIRE(normalization_.std > 0 && std::isfinite(normalization_.std) && std::isfinite(normalization_.mean),
                   "checkpoint '" + source.step_dir + "': input_normalization must have a finite mean and a positive std");
  model_ = models::build_model<float>(config_);
  model_->release_gradients();
  input_size_ = core::shape_size(model_->input_shape());
  classes_ = model_->output_shape().back();

  std::vector<float> params(static_cast<std::size_t>(model_->parameter_count()));
  std::vector<io::CheckpointDestination> dests;
  for (const auto& p : model_->parameter_info()) dests.push_back({"params/" + p.name, p.shape, params.data() + p.offset});
  io::read_checkpoint_tensors(source.step_dir, dests);
  HPCTRAIN_REQUIRE(meta.at("parameter_checksum").get<std::uint64_t>() == train::parameter_checksum(params.data(), params.size()),
                   "checkpoint '" + source.step_dir + "': the parameters read back do not match the checksum recorded "
                   "when they were written");
  core::from_host(model_->parameter_buffer(), params);
  Kokkos::fence();
}

void InferenceModel::predict_normalized(const float* x, std::int64_t rows, float* probabilities,
                                        std::int32_t* predictions) {
  if (rows == 0) return;
  core::Shape shape{rows};
  shape.insert(shape.end(), model_->input_shape().begin(), model_->input_shape().end());
  core::ensure_shape(input_, "hpctrain::serve::input", shape);
  using HostView = Kokkos::View<const float*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  Kokkos::deep_copy(input_.data, HostView(x, static_cast<std::size_t>(rows * input_size_)));
  const core::Tensor<float> logits = model_->forward(input_, /*train=*/false);
  const std::vector<float> z = core::to_host(logits.data);
  const auto k = static_cast<std::size_t>(classes_);
  for (std::size_t r = 0; r < static_cast<std::size_t>(rows); ++r) {
    const float* row = z.data() + r * k;
    const std::size_t best = static_cast<std::size_t>(std::max_element(row, row + k) - row);
    double sum = 0.0;
    for (std::size_t c = 0; c < k; ++c) sum += std::exp(static_cast<double>(row[c]) - row[best]);
    for (std::size_t c = 0; c < k; ++c) {
      probabilities[r * k + c] = static_cast<float>(std::exp(static_cast<double>(row[c]) - row[best]) / sum);
    }
    predictions[r] = static_cast<std::int32_t>(best);
  }
}

void InferenceModel::predict_raw(const float* u, std::int64_t rows, float* probabilities, std::int32_t* predictions) {
  // The data set reader's operations with scale 1: x = u * (1 / std) - mean / std.
  const float scale = 1.0f / normalization_.std;
  const float shift = normalization_.mean / normalization_.std;
  normalized_.resize(static_cast<std::size_t>(rows * input_size_));
  for (std::size_t i = 0; i < normalized_.size(); ++i) normalized_[i] = u[i] * scale - shift;
  predict_normalized(normalized_.data(), rows, probabilities, predictions);
}

}  // namespace hpctrain::serve
