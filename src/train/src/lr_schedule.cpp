#include "hpctrain/train/lr_schedule.hpp"

#include <algorithm>
#include <cmath>

#include "hpctrain/base/error.hpp"

namespace hpctrain::train {

double LrSchedule::at(std::int64_t step) const {
  if (step < warmup_steps) {
    return base_lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps + 1);
  }
  const std::int64_t s = step - warmup_steps;
  switch (kind) {
    case ScheduleKind::constant: return base_lr;
    case ScheduleKind::step:
      return base_lr * std::pow(gamma, static_cast<double>(s / std::max<std::int64_t>(1, step_size)));
    case ScheduleKind::cosine: {
      const double span = static_cast<double>(std::max<std::int64_t>(1, total_steps - warmup_steps));
      const double t = std::min(1.0, static_cast<double>(s) / span);
      return min_lr + (base_lr - min_lr) * 0.5 * (1.0 + std::cos(M_PI * t));
    }
  }
  return base_lr;
}

double scale_learning_rate(double lr, std::int64_t global_batch, std::int64_t reference_batch,
                           LrScaling scaling) {
  HPCTRAIN_REQUIRE(reference_batch > 0, "--lr-reference-batch must be positive");
  const double ratio = static_cast<double>(global_batch) / static_cast<double>(reference_batch);
  switch (scaling) {
    case LrScaling::none: return lr;
    case LrScaling::linear: return lr * ratio;
    case LrScaling::sqrt: return lr * std::sqrt(ratio);
  }
  return lr;
}

ScheduleKind parse_schedule(const std::string& name) {
  if (name == "constant") return ScheduleKind::constant;
  if (name == "step") return ScheduleKind::step;
  if (name == "cosine") return ScheduleKind::cosine;
  HPCTRAIN_FAIL("--schedule: unknown schedule '" + name + "' (expected constant, step or cosine)");
}

LrScaling parse_lr_scaling(const std::string& name) {
  if (name == "none") return LrScaling::none;
  if (name == "linear") return LrScaling::linear;
  if (name == "sqrt") return LrScaling::sqrt;
  HPCTRAIN_FAIL("--lr-scaling: unknown scaling '" + name + "' (expected none, linear or sqrt)");
}

std::string to_string(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::constant: return "constant";
    case ScheduleKind::step: return "step";
    case ScheduleKind::cosine: return "cosine";
  }
  return "?";
}

std::string to_string(LrScaling s) {
  switch (s) {
    case LrScaling::none: return "none";
    case LrScaling::linear: return "linear";
    case LrScaling::sqrt: return "sqrt";
  }
  return "?";
}

}  // namespace hpctrain::train
