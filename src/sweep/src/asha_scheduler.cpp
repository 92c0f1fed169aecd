#include "hpctrain/sweep/asha_scheduler.hpp"

#include <algorithm>
#include <cmath>

#include "hpctrain/base/error.hpp"

namespace hpctrain::sweep {

double percentile(std::vector<double> values, double q) {
  std::sort(values.begin(), values.end());
  const double position = q / 100.0 * static_cast<double>(values.size() - 1);
  const auto below = static_cast<std::size_t>(std::floor(position));
  const std::size_t above = std::min(values.size() - 1, below + 1);
  const double fraction = position - static_cast<double>(below);
  return values[below] + fraction * (values[above] - values[below]);
}

AshaScheduler::AshaScheduler(const AshaOptions& o) : options_(o) {
  HPCTRAIN_REQUIRE(o.grace_epochs >= 1, "--asha-grace-epochs must be at least 1, got " + std::to_string(o.grace_epochs));
  HPCTRAIN_REQUIRE(o.reduction_factor > 1.0 && std::isfinite(o.reduction_factor),
                   "--asha-reduction-factor must be greater than 1, got " + std::to_string(o.reduction_factor));
  for (double m = static_cast<double>(o.grace_epochs); m <= static_cast<double>(o.max_epochs) + 1e-9;
       m *= o.reduction_factor) {
    const auto epochs = static_cast<std::int64_t>(std::llround(m));
    if (milestones_.empty() || epochs > milestones_.back()) milestones_.push_back(epochs);
  }
  recorded_.resize(milestones_.size());
}

Decision AshaScheduler::on_result(std::int64_t trial, std::int64_t epochs_done, double metric, const nlohmann::json&) {
  Decision d;
  // The highest rung reached that this trial has not been recorded at (Ray's order: top down).
  for (std::size_t r = milestones_.size(); r-- > 0;) {
    if (epochs_done < milestones_[r]) continue;
    auto& rung = recorded_[r];
    if (rung.count(trial) != 0) break;
    const double s = score(metric, options_.mode);
    std::vector<double> scores;
    for (const auto& [t, v] : rung) {
      if (!std::isnan(v)) scores.push_back(v);
    }
    const double cutoff = scores.empty() ? NAN : percentile(scores, (1.0 - 1.0 / options_.reduction_factor) * 100.0);
    if (std::isnan(s) || (!scores.empty() && s < cutoff)) d.action = Decision::Action::stop;
    d.basis = {{"rung", milestones_[r]},
               {"rung_size", static_cast<std::int64_t>(rung.size())},
               {"cutoff", std::isnan(cutoff) ? nlohmann::json(nullptr) : nlohmann::json(cutoff)}};
    rung[trial] = s;
    break;
  }
  return d;
}

}  // namespace hpctrain::sweep
