#pragma once
// The parameter update shared by the strategies whose every rank holds the whole summed
// gradient (bucketed all-reduce, deterministic tree sum). ZeroSync does the same on its shard, with the
// trainable mask compacted as its parameters are.

#include <Kokkos_Core.hpp>

#include "hpctrain/core/optimizer.hpp"
#include "hpctrain/models/sequential.hpp"
#include "hpctrain/train/gradient_sync.hpp"

namespace hpctrain::train {

/// What a strategy hands the optimiser as its trainable mask: empty for a model without state
/// (every element updated), else Sequential::trainable_mask().
inline core::Vec<float> optimiser_mask(const models::Sequential<float>& model) {
  return model.has_state() ? model.trainable_mask() : core::Vec<float>();
}

/// Turns the model's state slots (summed, on every rank) into new state, then clips the
/// (already global) gradient to `clip_norm` (0: off) and steps `optimizer` at `lr` over the
/// elements `trainable` marks (optimiser_mask). update_state() leaves the state's gradient
/// slots zero, so the clipping norm leaves them out; the mask keeps weight decay and momentum
/// from moving the state.
inline void apply_full_gradient(models::Sequential<float>& model, core::Optimizer<float>& optimizer, double lr,
                                double clip_norm, const core::Vec<float>& trainable) {
  model.update_state();
  if (clip_norm > 0) core::clip_grad_norm(model.gradient_buffer(), clip_norm);
  optimizer.set_trainable_mask(trainable);
  optimizer.set_learning_rate(lr);
  optimizer.step(model.parameter_buffer(), model.gradient_buffer());
  Kokkos::fence();
}

/// What such a strategy holds: the parameters, and the whole gradient plus the optimiser's mask
/// (models with state only).
inline GradientSync::HeldBytes full_gradient_held_bytes(const models::Sequential<float>& model,
                                                        const core::Vec<float>& trainable) {
  const auto bytes = static_cast<std::uint64_t>(model.parameter_count()) * sizeof(float);
  return GradientSync::HeldBytes{bytes, bytes + trainable.extent(0) * sizeof(float)};
}

}  // namespace hpctrain::train
