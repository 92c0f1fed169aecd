#include "hpctrain/sweep/pbt_scheduler.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "hpctrain/base/error.hpp"

namespace hpctrain::sweep {

PbtScheduler::PbtScheduler(const PbtOptions& o, SearchSpace space) : options_(o), space_(std::move(space)) {
  HPCTRAIN_REQUIRE(o.interval_epochs >= 1,
                   "--pbt-interval-epochs must be at least 1, got " + std::to_string(o.interval_epochs));
  HPCTRAIN_REQUIRE(o.quantile > 0.0 && o.quantile <= 0.5, "--pbt-quantile must lie in (0, 0.5], got " +
                                                              std::to_string(o.quantile));
  HPCTRAIN_REQUIRE(o.perturb.first > 0.0 && o.perturb.second > 0.0 && std::isfinite(o.perturb.first) &&
                       std::isfinite(o.perturb.second),
                   "--pbt-perturb: both factors must be positive numbers");
}

double PbtScheduler::next_uniform(std::int64_t trial) {
  return uniform01(options_.seed, 0x9b7e000000000000ull + static_cast<std::uint64_t>(trial), draws_[trial]++);
}

nlohmann::json PbtScheduler::perturb(const nlohmann::json& donor_params, std::int64_t trial) {
  nlohmann::json params = donor_params;
  for (const auto& [name, d] : space_.search) {
    if (!d.continuous() || !params.contains(name) || !params[name].is_number()) continue;
    const double factor = next_uniform(trial) < 0.5 ? options_.perturb.first : options_.perturb.second;
    params[name] = std::clamp(params[name].get<double>() * factor, d.lo, d.hi);
  }
  return params;
}

Decision PbtScheduler::on_result(std::int64_t trial, std::int64_t epochs_done, double metric,
                                 const nlohmann::json& params) {
  const double s = std::isnan(metric) ? -INFINITY : score(metric, options_.mode);
  latest_[trial] = Latest{epochs_done, s, params};
  Decision d;
  if (epochs_done % options_.interval_epochs != 0) return d;
  std::vector<std::pair<double, std::int64_t>> ranked;  // (score, trial), ascending
  for (const auto& [t, l] : latest_) ranked.emplace_back(l.score, t);
  std::sort(ranked.begin(), ranked.end());
  const auto size = static_cast<std::int64_t>(ranked.size());
  std::int64_t n = static_cast<std::int64_t>(std::ceil(static_cast<double>(size) * options_.quantile));
  n = std::min(n, size / 2);
  d.basis = {{"population", size}, {"quantile_trials", n}};
  if (n == 0) return d;
  const bool bottom = std::any_of(ranked.begin(), ranked.begin() + n, [&](const auto& r) { return r.second == trial; });
  if (!bottom) return d;
  const auto pick = static_cast<std::int64_t>(next_uniform(trial) * static_cast<double>(n));
  const std::int64_t donor = ranked[static_cast<std::size_t>(size - 1 - std::min(pick, n - 1))].second;
  const Latest& from = latest_.at(donor);
  d.action = Decision::Action::exploit;
  d.donor = donor;
  d.donor_epochs = from.epochs;
  d.params = perturb(from.params, trial);
  latest_[trial] = Latest{from.epochs, from.score, d.params};  // it now is the donor's copy
  return d;
}

}  // namespace hpctrain::sweep
