#pragma once
// Internal to hpctrain::core: a grouped pass's micro-shard leaves side by side on the rank's
// threads, where deterministic training holds oneDNN at one thread (the convolutions'
// conv2d_*_in_leaves, the attention's products in attention.cpp). Each leaf runs on one thread
// of the team, its oneDNN calls on that thread as in a pass of that leaf alone, so its bits are
// that pass's at any team size.

#include "hpctrain/core/environment.hpp"
#include "hpctrain/core/tensor.hpp"

#include <algorithm>
#include <cstdint>
#include <exception>

namespace hpctrain::core::detail {

/// The threads `leaves` leaves of a kernel run on side by side: the held kernel threads while
/// deterministic training holds oneDNN at one thread, where each leaf's work goes to oneDNN (or
/// libxsmm) on its calling thread (`each_leaf_on_onednn`: the caller's backend test), there are
/// two leaves or more and the build has oneDNN and OpenMP; 1 (one after another) otherwise --
/// the vendor BLAS and the portable Kokkos kernels keep their own threads and run a leaf at a time.
inline int side_by_side_team([[maybe_unused]] std::int64_t leaves, [[maybe_unused]] bool each_leaf_on_onednn) {
#if defined(HPCTRAIN_HAVE_ONEDNN) && defined(HPCTRAIN_HAVE_OPENMP)
  if (each_leaf_on_onednn && leaves > 1) return std::max(1, held_kernel_threads());
#endif
  return 1;
}

/// body(l) for leaves 0 .. leaves-1 on `team` threads, one leaf per thread at a time (team > 1
/// only where side_by_side_team() says so: OpenMP builds). The bodies must touch raw pointers
/// only: Kokkos' reference counts are not made for other threads (a View copied in a body
/// crashed in SharedAllocationRecord::decrement). A leaf's exception is rethrown here once every
/// leaf has ended.
template <class Body>
void leaves_on_team(std::int64_t leaves, [[maybe_unused]] int team, const Body& body) {
  ExecSpace().fence();
  std::exception_ptr error;
#if defined(HPCTRAIN_HAVE_OPENMP)
#pragma omp parallel for schedule(dynamic, 1) num_threads(team)
#endif
  for (std::int64_t l = 0; l < leaves; ++l) {
    try {
      body(l);
    } catch (...) {
#if defined(HPCTRAIN_HAVE_OPENMP)
#pragma omp critical(hpctrain_leaves_side_by_side)
#endif
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace hpctrain::core::detail
