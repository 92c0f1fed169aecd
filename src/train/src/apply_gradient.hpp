#pragma once
// The parameter update shared by the strategies whose every rank holds the whole summed
// gradient (bucketed all-reduce, exact sum), and the handling of the model's non-trainable
// state that ZeroSync shares with it.

#include <Kokkos_Core.hpp>

#include <vector>

#include "hpctrain/core/optimizer.hpp"
#include "hpctrain/models/sequential.hpp"

namespace hpctrain::train {

/// The model's non-trainable state (batch norm's running statistics) around an optimiser step:
/// the constructor updates it from its (summed, on every rank) gradient slots, which
/// update_state() leaves zero, so a clipping norm taken afterwards leaves them out; restore()
/// puts the updated entries back after the step, so weight decay and momentum cannot move them.
/// Does nothing for a model without state.
class UpdatedState {
 public:
  explicit UpdatedState(models::Sequential<float>& model) : model_(model), has_state_(model.has_state()) {
    if (!has_state_) return;
    model.update_state();
    kept_ = model.copy_state();
  }
  void restore() const {
    if (has_state_) model_.restore_state(kept_);
  }

 private:
  models::Sequential<float>& model_;
  bool has_state_;
  std::vector<float> kept_;
};

/// Updates the model's state (UpdatedState), clips the (already global) gradient to
/// `clip_norm` (0: off), then steps `optimizer` at `lr` and puts the state back.
inline void apply_full_gradient(models::Sequential<float>& model, core::Optimizer<float>& optimizer, double lr,
                                double clip_norm) {
  const UpdatedState state(model);
  if (clip_norm > 0) core::clip_grad_norm(model.gradient_buffer(), clip_norm);
  optimizer.set_learning_rate(lr);
  optimizer.step(model.parameter_buffer(), model.gradient_buffer());
  state.restore();
  Kokkos::fence();
}

}  // namespace hpctrain::train
