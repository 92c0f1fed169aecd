#include "hpctrain/sweep/sweep_options.hpp"

#include "hpctrain/base/error.hpp"

namespace hpctrain::sweep {

SchedulerKind parse_scheduler(const std::string& name) {
  if (name == "none") return SchedulerKind::none;
  if (name == "asha") return SchedulerKind::asha;
  if (name == "pbt") return SchedulerKind::pbt;
  HPCTRAIN_FAIL("--scheduler: unknown scheduler '" + name + "' (expected none, asha or pbt)");
}

const char* to_string(SchedulerKind kind) noexcept {
  switch (kind) {
    case SchedulerKind::none:
      return "none";
    case SchedulerKind::asha:
      return "asha";
    case SchedulerKind::pbt:
      return "pbt";
  }
  return "?";
}

}  // namespace hpctrain::sweep
