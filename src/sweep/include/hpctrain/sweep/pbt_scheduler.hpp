#pragma once
/// @file
/// PBT (population-based training; Jaderberg et al. 2017, Ray Tune's
/// PopulationBasedTraining). Every `interval_epochs` a trial's latest score is ranked among the
/// latest scores of the population (every trial that has reported). The n = ceil(q * size)
/// worst (at most half the population) are the bottom, the n best the top. A trial in the
/// bottom exploits: it continues from the checkpoint of a top trial chosen at random (at the
/// epochs that trial last reported), with the donor's parameters, each continuous one
/// (uniform, loguniform) multiplied by one of the perturbation factors at random and clamped to
/// its range; other parameters are copied as they are. Random draws come from (seed, trial,
/// draw count), so a sweep's decisions depend only on the order results arrive in.

#include <cstdint>
#include <map>
#include <utility>

#include "hpctrain/sweep/scheduler.hpp"
#include "hpctrain/sweep/search_space.hpp"

namespace hpctrain::sweep {

struct PbtOptions {
  std::int64_t interval_epochs = 1;      ///< --pbt-interval-epochs
  double quantile = 0.25;                ///< --pbt-quantile, in (0, 0.5]
  std::pair<double, double> perturb{0.8, 1.2};  ///< --pbt-perturb
  Mode mode = Mode::max;
  std::uint64_t seed = 0;
};

class PbtScheduler final : public Scheduler {
 public:
  /// Throws hpctrain::Error naming the flag on an interval < 1, a quantile outside (0, 0.5] or
  /// a non-positive factor.
  PbtScheduler(const PbtOptions& options, SearchSpace space);
  Decision on_result(std::int64_t trial, std::int64_t epochs_done, double metric,
                     const nlohmann::json& params) override;

 private:
  struct Latest {
    std::int64_t epochs = 0;
    double score = 0.0;
    nlohmann::json params;
  };
  nlohmann::json perturb(const nlohmann::json& donor_params, std::int64_t trial);
  double next_uniform(std::int64_t trial);

  PbtOptions options_;
  SearchSpace space_;
  std::map<std::int64_t, Latest> latest_;
  std::map<std::int64_t, std::uint64_t> draws_;
};

}  // namespace hpctrain::sweep
