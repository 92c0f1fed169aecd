#pragma once
/// @file
/// Guards against training on, or saving, non-finite numbers: options, the loss of each step,
/// the parameters a checkpoint is about to commit.

#include <cstddef>
#include <cstdint>

#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/train/trainer.hpp"

namespace hpctrain::train {

/// Throws naming the option when a floating-point option of `o` (--lr, --momentum,
/// --weight-decay, --clip-norm, --gamma, --min-lr, --normalize-mean, --normalize-std,
/// --checkpoint-every-s) is NaN or infinite, and for the relations between them that no single
/// option shows: --min-lr above --lr, --step-size below 1, --normalize-std not positive.
void validate_numeric_options(const TrainOptions& o);

/// Collective, once per optimiser step, before the step is applied: every rank passes its own
/// share of the step's loss; when it is not finite on any rank, every rank throws (rank 0 an
/// Error naming `step` and the first such rank, the others PeerReportedError), so no
/// non-finite update is applied and nothing non-finite is checkpointed after it. Costs one
/// all-reduce of one int.
void require_finite_step_loss(coll::Communicator& comm, double my_loss, std::int64_t step);

/// Throws naming `step` and the first bad index when `params[0, count)` holds a NaN or an
/// infinity (before a checkpoint commits them). Replicated parameters are identical on every
/// rank, so every rank throws together.
void require_finite_parameters(const float* params, std::size_t count, std::int64_t step);

}  // namespace hpctrain::train
