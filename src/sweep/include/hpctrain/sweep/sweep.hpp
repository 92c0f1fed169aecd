#pragma once
/// @file
/// `hpctrain sweep`: a hyperparameter sweep inside one MPI job. The world's ranks are split
/// into P/K trial groups (coll::Communicator::split); each group trains one trial at a time with
/// the ordinary trainer (train::run_training on the group's communicator) and asks for the
/// next when it is free. The coordinator, a thread on world rank 0 (which is also a worker in
/// group 0), hands out trials, feeds every epoch's evaluation to the scheduler (none, ASHA,
/// PBT) and answers continue, stop or exploit. Output in --out (docs/sweeps.md): results.jsonl,
/// summary.json, best/, metric.png, trials/<n>/.
///
/// Failures: a trial whose options are invalid or whose training throws on every rank of its
/// group (non-finite loss, a bad parameter combination) is recorded as failed with its error
/// and the sweep goes on. SIGUSR1/SIGTERM: running trials checkpoint and stop, no new trial
/// starts, finished trials stay in results.jsonl, and the sweep returns train::kExitRequeue;
/// `--resume` then replays reports.jsonl into the scheduler (SweepLedger), runs only the trials
/// without a record, and an interrupted one goes on from its own last checkpoint.
///
/// Determinism: trial parameters are a function of (SPACE.json, --seed); with --deterministic
/// in `base` and --scheduler none every trial's results are the same bytes at any P and K.
/// ASHA's and PBT's decisions depend on the order results arrive in, so they are not.

#include <functional>

#include <nlohmann/json.hpp>

#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/sweep/search_space.hpp"
#include "hpctrain/sweep/sweep_options.hpp"
#include "hpctrain/train/trainer.hpp"

namespace hpctrain::sweep {

/// A trial's training options from option names and values (SPACE.json's base merged with the
/// trial's parameters), as `hpctrain train` would take them; throws on a bad value. Called on
/// every rank of the trial's group with that group's communicator.
using TrialOptionsFactory =
    std::function<train::TrainOptions(const nlohmann::json& options, coll::Communicator& group)>;

/// Collective over `world`. Returns the exit status: 0, or train::kExitRequeue when a
/// preemption signal stopped the sweep. Throws hpctrain::Error on bad options (every rank).
int run_sweep(const SweepOptions& options, const SearchSpace& space, const TrialOptionsFactory& factory,
              coll::Communicator& world);

}  // namespace hpctrain::sweep
