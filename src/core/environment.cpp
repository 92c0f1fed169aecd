#include "hpctrain/core/environment.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

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

namespace {

bool is_help_flag(const char* arg) { return std::strcmp(arg, "--help") == 0 || std::strcmp(arg, "-h") == 0; }

/// Kokkos::initialize without --help and -h: Kokkos would answer them with its own banner of
/// options before the program's help. Kokkos sees every other argument and may remove those it
/// consumes; argv is then the remaining ones with each help flag back after the argument it
/// followed (so `prog sub --help` still asks for the subcommand's help).
void initialize_kokkos_without_help(int& argc, char** argv) {
  std::vector<char*> kept(argv, argv + argc);
  std::vector<std::pair<char*, char*>> help;  // (help flag, the argument before it)
  for (int i = argc - 1; i >= 1; --i) {
    if (!is_help_flag(argv[i])) continue;
    help.emplace_back(argv[i], argv[i - 1]);
    kept.erase(kept.begin() + i);
  }
  int kokkos_argc = static_cast<int>(kept.size());
  kept.push_back(nullptr);
  char** kokkos_argv = kept.data();
  Kokkos::initialize(kokkos_argc, kokkos_argv);
  std::vector<char*> remaining(kokkos_argv, kokkos_argv + kokkos_argc);
  for (auto it = help.rbegin(); it != help.rend(); ++it) {
    auto after = std::find(remaining.begin(), remaining.end(), it->second);
    remaining.insert(after == remaining.end() ? remaining.end() : after + 1, it->first);
  }
  std::copy(remaining.begin(), remaining.end(), argv);
  argc = static_cast<int>(remaining.size());
  argv[argc] = nullptr;
}

}  // namespace

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
      initialize_kokkos_without_help(argc, argv);
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
