// Prints the execution space hpctrain's compute core runs on (hpctrain::core::ExecSpace, an
// alias of Kokkos::DefaultExecutionSpace) and fails unless it is the expected one:
//   kokkos_backend_check --expect-space=OpenMP --expect-concurrency=2 [--kokkos-threads=2]
// A parallel_reduce over thread ids also shows that the threads are really there.
#include "hpctrain/core/tensor.hpp"

#include <Kokkos_Core.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>

int main(int argc, char** argv) {
  std::string expect_space;
  int expect_concurrency = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--expect-space=", 0) == 0) expect_space = a.substr(15);
    if (a.rfind("--expect-concurrency=", 0) == 0) expect_concurrency = std::atoi(a.c_str() + 21);
  }
  Kokkos::initialize(argc, argv);
  int rc = 0;
  {
    using Space = hpctrain::core::ExecSpace;
    const std::string name = Space::name();
    const int concurrency = Space::concurrency();
    // How many distinct threads took part in a parallel loop (bitmask of thread ids < 64).
    unsigned long long seen = 0;
#if defined(KOKKOS_ENABLE_OPENMP)
    if (name == "OpenMP") {
      Kokkos::parallel_reduce(
          "kokkos_backend_check", Kokkos::RangePolicy<Kokkos::OpenMP>(0, 1 << 20),
          [](int, unsigned long long& mask) {
            const int id = Kokkos::OpenMP::impl_hardware_thread_id();
            mask |= 1ull << (id & 63);
          },
          Kokkos::BOr<unsigned long long>(seen));
    }
#endif
    const int threads_seen = __builtin_popcountll(seen);
    std::printf("kokkos_backend_check: Kokkos %d, DefaultExecutionSpace = %s, concurrency = %d,"
                " threads in a parallel_reduce = %d\n",
                KOKKOS_VERSION, name.c_str(), concurrency, threads_seen);
    if (!expect_space.empty() && name != expect_space) {
      std::fprintf(stderr, "kokkos_backend_check: expected %s\n", expect_space.c_str());
      rc = 1;
    }
    if (expect_concurrency > 0 && concurrency != expect_concurrency) {
      std::fprintf(stderr, "kokkos_backend_check: expected concurrency %d\n", expect_concurrency);
      rc = 1;
    }
  }
  Kokkos::finalize();
  return rc;
}
