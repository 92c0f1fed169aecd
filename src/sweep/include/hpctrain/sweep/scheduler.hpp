#pragma once
/// @file
/// Trial schedulers: small state machines fed with (trial, epochs done, metric) that answer
/// continue, stop or exploit, as Ray Tune's are. MPI-free (unit-tested alone); the sweep's
/// coordinator calls them on world rank 0 as the groups' epoch results arrive.

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
};

class Scheduler {
 public:
  virtual ~Scheduler() = default;
  /// `trial` (with `params`) has finished `epochs_done` epochs (counted from 1) with `metric`.
  virtual Decision on_result(std::int64_t trial, std::int64_t epochs_done, double metric,
                             const nlohmann::json& params) = 0;
  /// `trial` will report no more (completed, stopped or failed).
  virtual void on_finished(std::int64_t trial) {}
};

/// `--scheduler none`: every trial runs all its epochs.
class FifoScheduler final : public Scheduler {
 public:
  Decision on_result(std::int64_t, std::int64_t, double, const nlohmann::json&) override { return {}; }
};

/// `metric` as "larger is better" (min mode negates it; NaN stays NaN).
inline double score(double metric, Mode mode) noexcept { return mode == Mode::max ? metric : -metric; }

}  // namespace hpctrain::sweep
