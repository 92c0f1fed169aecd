#pragma once
/// @file
/// Guards against training on, or saving, non-finite numbers: options, the loss of each step,
/// the parameters a checkpoint is about to commit.

#include <cstddef>
#include <cstdint>
#include <string>

#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/core/tensor.hpp"
#include "hpctrain/train/trainer.hpp"

namespace hpctrain::train {

/// Throws naming the option when a floating-point option of `o` (--lr, --momentum,
/// --weight-decay, --clip-norm, --gamma, --min-lr, --normalize-mean, --normalize-std,
/// --checkpoint-every-s) is NaN or infinite, and for the relations between them that no single
/// option shows: --min-lr above --lr, --step-size below 1, --normalize-std not positive.
void validate_numeric_options(const TrainOptions& o);

/// Where a step's numbers stopped being finite (check_finite_step).
struct StepFiniteness {
  int loss_rank = -1;      ///< the lowest rank whose share of the step's loss is NaN or infinite; -1: none
  int gradient_rank = -1;  ///< the lowest rank whose part of the summed gradient holds one; -1: none
  bool finite() const noexcept { return loss_rank < 0 && gradient_rank < 0; }
  /// "step S: the training loss is not finite on rank R (nan)" or "... the summed gradient
  /// holds a NaN or an infinity on rank R (the loss is finite)"; `my_loss` is named on its rank.
  std::string describe(std::int64_t step, int my_rank, double my_loss) const;
};

/// Collective, once per optimiser step, after finish_step() and before the step is applied:
/// every rank passes its own share of the step's loss and the number of non-finite elements in
/// the part of the summed gradient it holds (GradientSync::count_nonfinite_gradient); every rank
/// learns whether any of them is non-finite. Costs one all-reduce of two ints.
StepFiniteness check_finite_step(coll::Communicator& comm, double my_loss, std::int64_t my_nonfinite_gradient);

/// Non-finite elements in rank `rank`'s balanced block (of `ranks`) of `gradient`, a summed
/// gradient every rank holds whole: the ranks scan it once between them, and
/// check_finite_step's all-reduce combines their counts.
std::int64_t count_nonfinite_in_my_block(const core::Vec<float>& gradient, int rank, int ranks);

/// Throws on every rank (rank 0 an Error, the others PeerReportedError, so the cause is printed
/// once) with `what` and the advice that goes with a non-finite step.
[[noreturn]] void throw_nonfinite_step(coll::Communicator& comm, const std::string& what);

/// Throws naming `step` and the first bad index when `params[0, count)` holds a NaN or an
/// infinity (before a checkpoint commits them). Replicated parameters are identical on every
/// rank, so every rank throws together.
void require_finite_parameters(const float* params, std::size_t count, std::int64_t step);

}  // namespace hpctrain::train
