#pragma once
/// @file
/// Learning-rate schedules and learning-rate scaling with the global batch.

#include <cstdint>
#include <string>

namespace hpctrain::train {

enum class ScheduleKind { constant, step, cosine };
enum class LrScaling { none, linear, sqrt };

/// lr(step) = warm-up ramp, then the schedule:
///   constant: base
///   step:     base * gamma^floor((step - warmup) / step_size)
///   cosine:   min + (base - min) * (1 + cos(pi * (step - warmup) / (total - warmup))) / 2
/// Warm-up: linear from base/(warmup+1) to base over the first `warmup_steps` steps.
struct LrSchedule {
  ScheduleKind kind = ScheduleKind::constant;
  double base_lr = 0.05;
  std::int64_t warmup_steps = 0;
  std::int64_t total_steps = 1;  ///< for cosine
  std::int64_t step_size = 1000; ///< for step
  double gamma = 0.1;            ///< for step
  double min_lr = 0.0;           ///< for cosine

  double at(std::int64_t step) const;
};

/// `lr` given for `reference_batch`, scaled for `global_batch` (linear: Goyal et al. 2017;
/// sqrt: Krizhevsky 2014).
double scale_learning_rate(double lr, std::int64_t global_batch, std::int64_t reference_batch,
                           LrScaling scaling);

ScheduleKind parse_schedule(const std::string& name);
LrScaling parse_lr_scaling(const std::string& name);
std::string to_string(ScheduleKind k);
std::string to_string(LrScaling s);

}  // namespace hpctrain::train
