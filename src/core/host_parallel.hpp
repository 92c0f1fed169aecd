#pragma once
// Element-wise host loops on the OpenMP threads a rank's gemm and convolutions already use.
//
// Debian's Kokkos is Serial, so Kokkos::parallel_for runs the optimiser step and the gradient's
// finiteness scan on one thread even when the rank owns several cores (one rank of T threads):
// the other T - 1 threads, oneDNN's OpenMP team, spin. In a build with OpenMP
// (HPCTRAIN_HAVE_OPENMP: host builds whose compiler has it) and a Serial execution space these
// loops run on that team instead, with the thread count the Environment chose
// (omp_set_num_threads), also where deterministic training holds oneDNN at one thread
// (held_kernel_threads). Every body is element-wise, an integer count, or a block whose sums
// keep their own order (column sums), so the result has the same bits at any thread count. Other execution spaces (Kokkos OpenMP, CUDA) keep Kokkos.

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "hpctrain/core/environment.hpp"
#include "hpctrain/core/tensor.hpp"

#if defined(HPCTRAIN_HAVE_OPENMP)
#include <omp.h>
#endif

namespace hpctrain::core::detail {

/// Below this many elements a loop stays on the calling thread (a fork costs microseconds).
inline constexpr std::int64_t kHostParallelMin = std::int64_t{1} << 15;

#if defined(HPCTRAIN_HAVE_OPENMP)
/// The team of kernels whose bits do not depend on their thread count: the count deterministic
/// training holds for them (held_kernel_threads), else the OpenMP runtime's.
inline int stable_kernel_team() {
  const int held = held_kernel_threads();
  return held > 0 ? held : omp_get_max_threads();
}
#endif

/// Whether host_parallel_for runs on the OpenMP team (the build has OpenMP, Kokkos is Serial).
constexpr bool host_loops_on_openmp() {
#if defined(HPCTRAIN_HAVE_OPENMP) && defined(KOKKOS_ENABLE_SERIAL)
  return std::is_same_v<ExecSpace, Kokkos::Serial>;
#else
  return false;
#endif
}

/// body(i) for i in [0, n): on the OpenMP team where host_loops_on_openmp(), else as the Kokkos
/// kernel `name`. `body` must be element-wise (no reductions, no order). `elements_per_index`:
/// how many elements one body(i) touches (a block of columns, a row), for the size below which
/// the loop stays on the calling thread.
template <class Body>
void host_parallel_for(const char* name, std::int64_t n, const Body& body, std::int64_t elements_per_index = 1) {
  if constexpr (host_loops_on_openmp()) {
#if defined(HPCTRAIN_HAVE_OPENMP)
    const bool fork = n > 1 && n * elements_per_index >= kHostParallelMin;
#pragma omp parallel for schedule(static) num_threads(stable_kernel_team()) if (fork)
    for (std::int64_t i = 0; i < n; ++i) body(i);
#endif
  } else {
    Kokkos::parallel_for(name, Kokkos::RangePolicy<ExecSpace>(0, n), body);
  }
}

/// The sum of count(first, last) over [0, n) in chunks of `chunk` elements, on the OpenMP team
/// where the build has OpenMP (an integer sum: the same at any thread count). Host data only.
template <class Count>
std::int64_t host_parallel_count(std::int64_t n, std::int64_t chunk, const Count& count) {
  const std::int64_t chunks = (n + chunk - 1) / chunk;
  std::int64_t total = 0;
#if defined(HPCTRAIN_HAVE_OPENMP)
#pragma omp parallel for schedule(static) num_threads(stable_kernel_team()) reduction(+ : total) if (n >= kHostParallelMin)
#endif
  for (std::int64_t c = 0; c < chunks; ++c) total += count(c * chunk, std::min(n, (c + 1) * chunk));
  return total;
}

}  // namespace hpctrain::core::detail
