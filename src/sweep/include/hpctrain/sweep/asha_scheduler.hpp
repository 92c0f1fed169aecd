#pragma once
/// @file
/// ASHA (asynchronous successive halving; Li et al. 2020, Ray Tune's AsyncHyperBandScheduler
/// with one bracket). Rungs sit at grace * rf^k epochs (k = 0, 1, ... while below or at
/// max_epochs). A trial reaching a rung is compared with the scores recorded there so far: it is
/// stopped when its score is below their (1 - 1/rf) quantile (linear interpolation, as numpy's
/// percentile), otherwise recorded and continued. The first trial at a rung always continues, so
/// which trials stop depends on the order they arrive in, as in any asynchronous ASHA.

#include <cstdint>
#include <map>
#include <vector>

#include "hpctrain/sweep/scheduler.hpp"

namespace hpctrain::sweep {

struct AshaOptions {
  std::int64_t grace_epochs = 1;     ///< first rung (--asha-grace-epochs)
  double reduction_factor = 2.0;     ///< rf > 1 (--asha-reduction-factor): 1/rf of the trials go on
  std::int64_t max_epochs = 1;       ///< the longest trial's epochs (no rung beyond it)
  Mode mode = Mode::max;
};

class AshaScheduler final : public Scheduler {
 public:
  /// Throws hpctrain::Error naming the flag on grace < 1 or rf <= 1.
  explicit AshaScheduler(const AshaOptions& options);
  Decision on_result(std::int64_t trial, std::int64_t epochs_done, double metric,
                     const nlohmann::json& params) override;
  /// The rung milestones in epochs, ascending.
  const std::vector<std::int64_t>& rungs() const noexcept { return milestones_; }

 private:
  AshaOptions options_;
  std::vector<std::int64_t> milestones_;
  std::vector<std::map<std::int64_t, double>> recorded_;  ///< per rung: trial -> score
};

/// numpy.percentile(values, q) with linear interpolation (q in [0, 100]); values not empty.
double percentile(std::vector<double> values, double q);

}  // namespace hpctrain::sweep
