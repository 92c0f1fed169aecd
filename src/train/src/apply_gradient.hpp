#pragma once
// The parameter update shared by the strategies whose every rank holds the whole summed
// gradient (bucketed all-reduce, exact sum).

#include <Kokkos_Core.hpp>

#include "hpctrain/core/optimizer.hpp"
#include "hpctrain/models/sequential.hpp"

namespace hpctrain::train {

/// Clips the (already global) gradient to `clip_norm` (0: off), then steps `optimizer` at `lr`.
inline void apply_full_gradient(models::Sequential<float>& model, core::Optimizer<float>& optimizer, double lr,
                                double clip_norm) {
  if (clip_norm > 0) core::clip_grad_norm(model.gradient_buffer(), clip_norm);
  optimizer.set_learning_rate(lr);
  optimizer.step(model.parameter_buffer(), model.gradient_buffer());
  Kokkos::fence();
}

}  // namespace hpctrain::train
