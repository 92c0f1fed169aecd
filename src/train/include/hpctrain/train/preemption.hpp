#pragma once
/// @file
/// Preemption: SIGUSR1 and SIGTERM only set a flag; the trainer checks it at step boundaries,
/// where all ranks agree by an all-reduce, checkpoint and exit with kExitRequeue.

namespace hpctrain::train {

/// Exit status of `hpctrain train` after a preemption checkpoint: "checkpointed, please
/// requeue" (EX_TEMPFAIL). The Slurm templates requeue the job on it.
inline constexpr int kExitRequeue = 75;

/// Installs the SIGUSR1/SIGTERM handlers (idempotent). A second signal while the checkpoint is
/// being written only sets the flag again.
void install_preemption_handlers();
/// Whether a preemption signal has arrived (async-signal-safe flag).
bool preemption_requested() noexcept;
/// The signal number that arrived last (0 if none).
int preemption_signal() noexcept;
/// For tests: clears the flag.
void reset_preemption() noexcept;

}  // namespace hpctrain::train
