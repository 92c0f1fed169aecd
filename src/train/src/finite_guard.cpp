#include "hpctrain/train/finite_guard.hpp"

#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "hpctrain/base/error.hpp"
#include "hpctrain/core/elementwise.hpp"

namespace hpctrain::train {

namespace {

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace

void validate_numeric_options(const TrainOptions& o) {
  const std::vector<std::pair<const char*, double>> values = {
      {"--lr", o.lr},
      {"--momentum", o.momentum},
      {"--weight-decay", o.weight_decay},
      {"--clip-norm", o.clip_norm},
      {"--gamma", o.schedule.gamma},
      {"--min-lr", o.schedule.min_lr},
      {"--normalize-mean", o.normalize_mean},
      {"--normalize-std", o.normalize_std},
      {"--checkpoint-every-s", o.checkpoint_every_s},
  };
  for (const auto& [name, value] : values) {
    HPCTRAIN_REQUIRE(std::isfinite(value), std::string(name) + " must be a finite number, got " + number(value));
  }
  HPCTRAIN_REQUIRE(o.schedule.gamma > 0, "--gamma must be positive, got " + number(o.schedule.gamma));
  HPCTRAIN_REQUIRE(o.schedule.min_lr >= 0 && o.schedule.min_lr <= o.lr,
                   "--min-lr must lie in [0, --lr] = [0, " + number(o.lr) + "], got " + number(o.schedule.min_lr));
  HPCTRAIN_REQUIRE(o.schedule.step_size >= 1,
                   "--step-size must be at least 1, got " + std::to_string(o.schedule.step_size));
  HPCTRAIN_REQUIRE(o.schedule.warmup_steps >= 0,
                   "--warmup-steps must be non-negative, got " + std::to_string(o.schedule.warmup_steps));
  HPCTRAIN_REQUIRE(o.normalize_std > 0, "--normalize-std must be positive, got " + number(o.normalize_std));
}

std::string StepFiniteness::describe(std::int64_t step, int my_rank, double my_loss) const {
  const std::string at = "step " + std::to_string(step) + ": ";
  if (loss_rank >= 0) {
    return at + "the training loss is not finite on rank " + std::to_string(loss_rank) +
           (loss_rank == my_rank ? " (" + number(my_loss) + ")" : std::string());
  }
  return at + "the summed gradient holds a NaN or an infinity on rank " + std::to_string(gradient_rank) +
         " (the loss is finite)";
}

StepFiniteness check_finite_step(coll::Communicator& comm, double my_loss, std::int64_t my_nonfinite_gradient) {
  // The lowest rank with a non-finite loss share, and with a non-finite gradient part, or
  // size() for none: one all-reduce (min) of two ints.
  int first_bad[2] = {std::isfinite(my_loss) ? comm.size() : comm.rank(),
                      my_nonfinite_gradient == 0 ? comm.size() : comm.rank()};
  comm.allreduce(first_bad, 2, coll::ReduceOp::min);
  StepFiniteness f;
  if (first_bad[0] < comm.size()) f.loss_rank = first_bad[0];
  if (first_bad[1] < comm.size()) f.gradient_rank = first_bad[1];
  return f;
}

std::int64_t count_nonfinite_in_my_block(const core::Vec<float>& gradient, int rank, int ranks) {
  const coll::BlockRange mine = coll::balanced_block(gradient.extent(0), ranks, rank);
  return core::count_nonfinite<float>(Kokkos::subview(gradient, std::make_pair(mine.offset, mine.offset + mine.count)));
}

void throw_nonfinite_step(coll::Communicator& comm, const std::string& what) {
  const std::string message = what +
                              "; stopped before applying the step (nothing non-finite is checkpointed). Lower --lr, "
                              "set --clip-norm, or let --skip-nonfinite-steps N skip up to N such steps";
  if (comm.rank() == 0) throw Error(message, __FILE__, __LINE__);
  throw PeerReportedError(message, __FILE__, __LINE__);
}

void require_finite_parameters(const float* params, std::size_t count, std::int64_t step) {
  for (std::size_t i = 0; i < count; ++i) {
    HPCTRAIN_REQUIRE(std::isfinite(params[i]), "step " + std::to_string(step) + ": parameter " + std::to_string(i) +
                                                   " is " + number(params[i]) +
                                                   ": refusing to checkpoint non-finite parameters");
  }
}

}  // namespace hpctrain::train
