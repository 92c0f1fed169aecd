#pragma once
// (internal) One trial on one group: the trainer run with the trial's options, its epoch
// results sent to the coordinator, and the record of how it ended. A PBT exploit ends the
// current run; the next run starts from a copy of the donor's checkpoint with the new params.

#include <nlohmann/json.hpp>

#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/sweep/sweep.hpp"
#include "trial_messages.hpp"

namespace hpctrain::sweep {

struct TrialContext {
  const SweepOptions& sweep;
  const nlohmann::json& base;  ///< SPACE.json's base (option names with dashes)
  const TrialOptionsFactory& factory;
  coll::Communicator& group;
  TrialChannel& channel;  ///< used by the group's rank 0 only
};

/// Collective over the group. `assignment` = {"trial", "params"}; returns the trial's record
/// (results.jsonl's fields; status completed, stopped, failed or interrupted).
nlohmann::json run_trial(const TrialContext& context, const nlohmann::json& assignment);

/// Optimiser steps of one epoch of a run with options `o` (what --checkpoint-every is set to,
/// so every epoch's end has a checkpoint).
std::int64_t steps_per_epoch(const train::TrainOptions& o);

}  // namespace hpctrain::sweep
