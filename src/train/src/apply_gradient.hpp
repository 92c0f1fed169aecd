#pragma once
// The parameter update shared by the strategies whose every rank holds the whole summed
// gradient (bucketed all-reduce, exact sum).

#include <Kokkos_Core.hpp>

#include <vector>

#include "hpctrain/core/optimizer.hpp"
#include "hpctrain/models/sequential.hpp"

namespace hpctrain::train {

/// Updates the model's non-trainable state (batch norm's running statistics) from its
/// gradient slots, clips the (already global) gradient to `clip_norm` (0: off), then steps
/// `optimizer` at `lr`; the state is put back after the step so weight decay cannot move it.
inline void apply_full_gradient(models::Sequential<float>& model, core::Optimizer<float>& optimizer, double lr,
                                double clip_norm) {
  const bool state = model.has_state();
  std::vector<float> kept;
  if (state) {
    model.update_state();
    kept = model.copy_state();
  }
  if (clip_norm > 0) core::clip_grad_norm(model.gradient_buffer(), clip_norm);
  optimizer.set_learning_rate(lr);
  optimizer.step(model.parameter_buffer(), model.gradient_buffer());
  if (state) model.restore_state(kept);
  Kokkos::fence();
}

}  // namespace hpctrain::train
