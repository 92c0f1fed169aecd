#pragma once
/// @file
/// Trial schedulers: small state machines fed with (trial, epochs done, metric) that answer
/// continue, stop or exploit, as Ray Tune's are. MPI-free (unit-tested alone); the sweep's
/// coordinator calls them on world rank 0 as the groups' epoch results arrive.
///
/// Replay contract (what `hpctrain sweep --resume` relies on): a scheduler's state and
/// decisions are a function of the sequence of on_result calls it has seen, nothing else (no
/// clock, no global random state). So a fresh scheduler fed the journal of an interrupted sweep
/// (reports.jsonl, in its order) through replay() is in the state the interrupted one was in,
/// and decides the following results as it would have.

#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace hpctrain::sweep {

/// Whether a larger metric is better (test_accuracy) or a smaller (test_loss).
enum class Mode { max, min };

struct Decision {
  enum class Action { proceed, stop, exploit };
  Action action = Action::proceed;
  /// exploit: continue from trial `donor`'s checkpoint after `donor_epochs` epochs, with `params`.
  std::int64_t donor = -1;
  std::int64_t donor_epochs = 0;
  nlohmann::json params;
  /// What the decision was based on, for the record (reports.jsonl's "decision"); ASHA:
  /// {"rung": the rung's epochs, "rung_size": scores recorded there before this one, "cutoff":
  /// the quantile it was compared with, as a score (larger is better), null at an empty rung};
  /// PBT, at a decision epoch: {"population": trials ranked, "quantile_trials": n}.
  nlohmann::json basis = nlohmann::json::object();
};

class Scheduler {
 public:
  virtual ~Scheduler() = default;
  /// `trial` (with `params`) has finished `epochs_done` epochs (counted from 1) with `metric`.
  virtual Decision on_result(std::int64_t trial, std::int64_t epochs_done, double metric,
                             const nlohmann::json& params) = 0;
  /// `trial` will report no more (completed, stopped or failed).
  virtual void on_finished(std::int64_t trial) {}
  /// Rebuilds the state after a resume: one journaled result, fed in the journal's order. The
  /// default is on_result (the replay contract above); a scheduler that keeps state outside it
  /// overrides this. Returns the decision, which the caller compares with the journaled one.
  virtual Decision replay(std::int64_t trial, std::int64_t epochs_done, double metric, const nlohmann::json& params) {
    return on_result(trial, epochs_done, metric, params);
  }
};

/// `--scheduler none`: every trial runs all its epochs.
class FifoScheduler final : public Scheduler {
 public:
  Decision on_result(std::int64_t, std::int64_t, double, const nlohmann::json&) override { return {}; }
};

/// `metric` as "larger is better" (min mode negates it; NaN stays NaN).
inline double score(double metric, Mode mode) noexcept { return mode == Mode::max ? metric : -metric; }

}  // namespace hpctrain::sweep
