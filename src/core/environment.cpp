#include "hpctrain/core/environment.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "hpctrain/collectives/error.hpp"

#include <Kokkos_Core.hpp>
#include <mpi.h>

namespace hpctrain {

void choose_openblas_kernels(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") || std::getenv("HPCTRAIN_KEEP_BLAS_CORETYPE")) return;
  using CoreName = char* (*)();
  auto corename = reinterpret_cast<CoreName>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  if (!corename) return;  // the BLAS is not OpenBLAS
  const std::string core = corename();
  if (core != "Prescott" && core != "Core2" && core != "Nehalem" && core != "Sandybridge") return;
  const char* better = nullptr;
  if (__builtin_cpu_supports("avx512f")) {
    better = "SkylakeX";
  } else if (__builtin_cpu_supports("avx2")) {
    better = "Haswell";
  }
  if (!better) return;
  setenv("OPENBLAS_CORETYPE", better, 1);
  execv("/proc/self/exe", argv);  // returns only on failure: carry on with the slow kernels
}

int set_blas_threads(int threads) {
  using SetThreads = void (*)(int);
  using GetThreads = int (*)();
  auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  auto get = reinterpret_cast<GetThreads>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  if (!set || !get) return -1;
  set(threads);
  return get();
}

int blas_threads() {
  using GetThreads = int (*)();
  auto get = reinterpret_cast<GetThreads>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  return get ? get() : -1;
}

Environment::Environment() {
  int argc = 0;
  char* args[] = {nullptr};
  char** argv = args;
  start(argc, argv);
}

Environment::Environment(int& argc, char**& argv) { start(argc, argv); }

void Environment::start(int& argc, char**& argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) {
    MPI_Query_thread(&thread_level_);
  } else {
    const int rc = MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &thread_level_);
    HPCTRAIN_REQUIRE(rc == MPI_SUCCESS, "MPI_Init_thread failed");
    owns_mpi_ = true;
  }
  if (!Kokkos::is_initialized()) {
    try {
      Kokkos::initialize(argc, argv);
    } catch (...) {
      if (owns_mpi_) MPI_Finalize();
      throw;
    }
    owns_kokkos_ = true;
  }
}

Environment::~Environment() {
  try {
    if (owns_kokkos_ && Kokkos::is_initialized()) Kokkos::finalize();
  } catch (...) {  // destructors never throw; nothing useful to do at exit
  }
  if (owns_mpi_) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }
}

}  // namespace hpctrain
