#pragma once
// Internal to hpctrain::collectives: the algorithms the cost model prices (every one but
// automatic and the vendor pass-throughs mpi and nccl), in enum order, and their bits in
// Tuning::auto_algorithms. Shared by the tuning file (its algorithm lists) and the cost model
// (the candidates of `auto`).

#include <cstddef>
#include <cstdint>

#include "hpctrain/collectives/types.hpp"

namespace hpctrain::coll::detail {

// Tuning::kAllModelled and CostModel::overhead_s are laid out by these enum values.
static_assert(static_cast<int>(Algorithm::automatic) == 0 && static_cast<int>(Algorithm::mpi) == 3 &&
                  static_cast<int>(Algorithm::hierarchical) == 7 &&
                  static_cast<std::size_t>(Algorithm::nccl) + 1 == kAlgorithmCount,
              "update Tuning::kAllModelled and kAlgorithmCount with the Algorithm enum");
inline constexpr Algorithm kModelled[] = {Algorithm::ring,         Algorithm::tree, Algorithm::recursive_doubling,
                                          Algorithm::rabenseifner, Algorithm::shm,  Algorithm::hierarchical};

/// Whether the cost model prices `a` (and `auto` may pick it): not automatic, mpi or nccl.
constexpr bool is_modelled(Algorithm a) {
  return a != Algorithm::automatic && a != Algorithm::mpi && a != Algorithm::nccl;
}

/// The bit of `a` in Tuning::auto_algorithms.
constexpr std::uint32_t bit(Algorithm a) { return 1u << static_cast<unsigned>(a); }

/// The double binary tree over p ranks (tree_allreduce.cpp): the most tree links (parent and
/// children, both trees together) any one rank has. In the pipeline's steady state that rank
/// moves one segment over each of them per step: 4 when every interior rank of one tree is a
/// leaf of the other (p = 2^k - 1), 5 for most other p (one rank is interior in both).
int double_tree_busiest_links(int p);

}  // namespace hpctrain::coll::detail
