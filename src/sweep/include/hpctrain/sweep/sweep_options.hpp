#pragma once
/// @file
/// The options of `hpctrain sweep` (docs/sweeps.md), every knob in one place.

#include <cstdint>
#include <string>
#include <utility>

#include "hpctrain/sweep/scheduler.hpp"

namespace hpctrain::sweep {

enum class SchedulerKind { none, asha, pbt };

struct SweepOptions {
  std::string space_file;               ///< --space SPACE.json
  std::string out_dir;                  ///< --out DIR
  int ranks_per_trial = 1;              ///< --ranks-per-trial K: P/K groups (P % K == 0)
  SchedulerKind scheduler = SchedulerKind::none;
  std::int64_t max_trials = 8;          ///< --max-trials (grid: at most this many, 0 = the whole grid)
  std::string metric = "test_accuracy"; ///< test_accuracy | test_loss
  Mode mode = Mode::max;                ///< --mode (default: max for accuracy, min for loss)
  int max_concurrent = 0;               ///< trials running at once (0: one per group)
  std::uint64_t seed = 0;               ///< --seed (default: SPACE.json's "seed", else 0)
  bool seed_given = false;
  std::int64_t asha_grace_epochs = 1;
  double asha_reduction_factor = 2.0;
  std::int64_t pbt_interval_epochs = 1;
  double pbt_quantile = 0.25;
  std::pair<double, double> pbt_perturb{0.8, 1.2};
  bool resume = false;        ///< --resume: keep DIR's finished trials, run the rest
  bool tensorboard = false;   ///< --tensorboard: event files per trial under trials/<n>/tensorboard
  bool quiet = false;
};

/// Parses a scheduler name (none, asha, pbt); throws naming --scheduler.
SchedulerKind parse_scheduler(const std::string& name);
const char* to_string(SchedulerKind kind) noexcept;

}  // namespace hpctrain::sweep
