#pragma once
// Internal to hpctrain::collectives: the algorithms the cost model prices (every one but
// automatic and mpi), in enum order, and their bits in Tuning::auto_algorithms. Shared by the
// tuning file (its algorithm lists) and the cost model (the candidates of `auto`).

#include <cstddef>
#include <cstdint>

#include "hpctrain/collectives/types.hpp"

namespace hpctrain::coll::detail {

// Tuning::kAllModelled and CostModel::overhead_s are laid out by these enum values.
static_assert(static_cast<int>(Algorithm::automatic) == 0 && static_cast<int>(Algorithm::mpi) == 3 &&
                  static_cast<std::size_t>(Algorithm::hierarchical) + 1 == kAlgorithmCount,
              "update Tuning::kAllModelled and kAlgorithmCount with the Algorithm enum");
inline constexpr Algorithm kModelled[] = {Algorithm::ring,         Algorithm::tree, Algorithm::recursive_doubling,
                                          Algorithm::rabenseifner, Algorithm::shm,  Algorithm::hierarchical};

/// The bit of `a` in Tuning::auto_algorithms.
constexpr std::uint32_t bit(Algorithm a) { return 1u << static_cast<unsigned>(a); }

}  // namespace hpctrain::coll::detail
