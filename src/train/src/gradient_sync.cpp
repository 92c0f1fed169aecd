#include "hpctrain/train/gradient_sync.hpp"

#include <numeric>

namespace hpctrain::train {

std::int64_t OptimizerStep::samples() const noexcept {
  return std::accumulate(batch_sizes.begin(), batch_sizes.end(), std::int64_t{0});
}

}  // namespace hpctrain::train
