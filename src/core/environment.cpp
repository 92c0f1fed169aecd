#include "hpctrain/core/environment.hpp"

#include <dlfcn.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "hpctrain/base/error.hpp"

#include <Kokkos_Core.hpp>
#ifdef HPCTRAIN_HAVE_MPI
#include <mpi.h>
#endif
#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_runtime.h>
#endif

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
  if (auto omp_set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"))) {
    omp_set(threads);  // the OpenMP runtime oneDNN (and a Kokkos OpenMP build) run on
  }
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

namespace {
std::atomic<int> held_threads{0};

int openmp_max_threads() {
  using GetThreads = int (*)();
  auto get = reinterpret_cast<GetThreads>(dlsym(RTLD_DEFAULT, "omp_get_max_threads"));
  return get ? std::max(1, get()) : 1;
}
}  // namespace

int held_kernel_threads() noexcept { return held_threads.load(std::memory_order_relaxed); }

SingleThreadedLibraries::SingleThreadedLibraries()
    : previous_blas_(hpctrain::blas_threads()), kernels_(openmp_max_threads()) {
  HPCTRAIN_REQUIRE(held_threads.load() == 0, "SingleThreadedLibraries: one is already in force");
  held_threads.store(kernels_);
  blas_ = set_blas_threads(1);
}

SingleThreadedLibraries::~SingleThreadedLibraries() {
  set_blas_threads(previous_blas_ > 0 ? previous_blas_ : kernels_);  // OpenMP's count too
  held_threads.store(0);
}

namespace {

ComputeThreads& applied_threads() {
  static ComputeThreads t{0, 0, 0, "no Environment yet"};
  return t;
}

int positive_env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return 0;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  HPCTRAIN_REQUIRE(end != v && *end == '\0' && n >= 1 && n <= 4096,
                   std::string(name) + "='" + v + "': expected a thread count from 1 to 4096");
  return static_cast<int>(n);
}

/// This rank's place on its node (MPI_COMM_TYPE_SHARED): its index and the node's rank count;
/// {0, 1} when the split fails, and always without MPI (one process).
struct NodePlace {
  int rank = 0;
  int size = 1;
};
NodePlace place_on_this_node() {
  NodePlace p;
#ifdef HPCTRAIN_HAVE_MPI
  MPI_Comm node = MPI_COMM_NULL;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) != MPI_SUCCESS) return p;
  MPI_Comm_rank(node, &p.rank);
  MPI_Comm_size(node, &p.size);
  MPI_Comm_free(&node);
#endif
  return p;
}

/// GPUs the Kokkos back end sees (0 in a host build), before Kokkos is initialised.
int gpu_device_count() {
#if defined(KOKKOS_ENABLE_CUDA)
  int n = 0;  // the runtime's count (CUDA_VISIBLE_DEVICES applied); Kokkos 3 and 4 differ here
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
#else
  return 0;
#endif
}

bool argv_names_device(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    for (const char* flag : {"--kokkos-device-id", "--kokkos-device", "--kokkos-num-devices"}) {
      const std::size_t n = std::strlen(flag);
      if (std::strncmp(argv[i], flag, n) == 0 && (argv[i][n] == '\0' || argv[i][n] == '=')) return true;
    }
  }
  return false;
}

DeviceChoice& applied_device() {
  static DeviceChoice d;
  return d;
}

int cores_in_affinity_mask() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 0;
  return CPU_COUNT(&set);
}

}  // namespace

ComputeThreads choose_compute_threads(int ranks_on_node, int cores_usable, int cores_online) {
  ComputeThreads t;
  t.ranks_on_node = ranks_on_node < 1 ? 1 : ranks_on_node;
  t.cores_usable = cores_usable < 1 ? 1 : cores_usable;
  const int online = cores_online < 1 ? t.cores_usable : cores_online;
  if (const int n = positive_env("HPCTRAIN_THREADS_PER_RANK")) {
    t.per_rank = n;
    t.source = "HPCTRAIN_THREADS_PER_RANK";
  } else if (const int n = positive_env("OMP_NUM_THREADS")) {
    t.per_rank = n;
    t.source = "OMP_NUM_THREADS";
  } else if (const int n = positive_env("OPENBLAS_NUM_THREADS")) {
    t.per_rank = n;
    t.source = "OPENBLAS_NUM_THREADS";
  } else if (t.cores_usable < online) {
    t.per_rank = t.cores_usable;
    t.source = "the cores this rank is bound to";
  } else {
    t.per_rank = online / t.ranks_on_node < 1 ? 1 : online / t.ranks_on_node;
    t.source = "cores / ranks on this node";
  }
  return t;
}

const ComputeThreads& compute_threads() { return applied_threads(); }

void set_threads_per_rank(int threads, const std::string& source) {
  HPCTRAIN_REQUIRE(threads >= 1 && threads <= 4096,
                   source + " " + std::to_string(threads) + ": expected a thread count from 1 to 4096");
  set_blas_threads(threads);
  applied_threads().per_rank = threads;
  applied_threads().source = source;
}

std::string describe(const ComputeThreads& t) {
  return std::to_string(t.per_rank) + (t.per_rank == 1 ? " thread" : " threads") + " per rank (" +
         std::to_string(t.ranks_on_node) + (t.ranks_on_node == 1 ? " rank" : " ranks") + " on this node, " +
         std::to_string(t.cores_usable) + (t.cores_usable == 1 ? " core" : " cores") + " usable; from " +
         t.source + ")";
}

Environment::Environment() {
  int argc = 0;
  char* args[] = {nullptr};
  char** argv = args;
  start(argc, argv);
}

DeviceChoice choose_device(int local_rank, int ranks_on_node, int devices, const char* device_env,
                           bool argv_names_device) {
  DeviceChoice d;
  d.devices = devices < 0 ? 0 : devices;
  if (d.devices == 0) return d;
  if (argv_names_device) {
    d.source = "--kokkos-device-id";
    return d;  // Kokkos applies what the command line says
  }
  if (device_env != nullptr && *device_env != '\0') {
    char* end = nullptr;
    const long id = std::strtol(device_env, &end, 10);
    HPCTRAIN_REQUIRE(end != device_env && *end == '\0' && id >= 0 && id < d.devices,
                     std::string("HPCTRAIN_DEVICE_ID='") + device_env + "': expected a GPU id from 0 to " +
                         std::to_string(d.devices - 1) + " (this process sees " + std::to_string(d.devices) +
                         (d.devices == 1 ? " GPU)" : " GPUs)"));
    d.device = static_cast<int>(id);
    d.source = "HPCTRAIN_DEVICE_ID";
    return d;
  }
  const int local = local_rank < 0 ? 0 : local_rank;
  d.device = local % d.devices;
  d.source = "local rank";
  if (ranks_on_node > d.devices) {
    d.warning = std::to_string(ranks_on_node) + " ranks on this node share " + std::to_string(d.devices) +
                (d.devices == 1 ? " GPU" : " GPUs") + ": start one rank per GPU (or set HPCTRAIN_DEVICE_ID)";
  }
  return d;
}

const DeviceChoice& device_choice() { return applied_device(); }

std::string describe(const DeviceChoice& d) {
  if (d.devices == 0) return "";
  const std::string of = " of " + std::to_string(d.devices) + (d.devices == 1 ? " GPU" : " GPUs");
  if (d.device < 0) return "as the command line's " + d.source + " says," + of;
  return "cuda:" + std::to_string(d.device) + of + " (" + d.source + ")";
}

Environment::Environment(int& argc, char**& argv) { start(argc, argv); }

namespace {

bool is_help_flag(const char* arg) { return std::strcmp(arg, "--help") == 0 || std::strcmp(arg, "-h") == 0; }

/// Kokkos::initialize without --help and -h: Kokkos would answer them with its own banner of
/// options before the program's help. Kokkos sees every other argument and may remove those it
/// consumes; argv is then the remaining ones with each help flag back after the argument it
/// followed (so `prog sub --help` still asks for the subcommand's help).
void initialize_kokkos_without_help(int& argc, char** argv, int device) {
  std::vector<char*> kept(argv, argv + argc);
  std::string device_arg = "--kokkos-device-id=" + std::to_string(device);
  if (device >= 0) kept.push_back(device_arg.data());  // Kokkos consumes it; argv never sees it
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
  remaining.erase(std::remove(remaining.begin(), remaining.end(), device_arg.data()), remaining.end());
  for (auto it = help.rbegin(); it != help.rend(); ++it) {
    auto after = std::find(remaining.begin(), remaining.end(), it->second);
    remaining.insert(after == remaining.end() ? remaining.end() : after + 1, it->first);
  }
  std::copy(remaining.begin(), remaining.end(), argv);
  argc = static_cast<int>(remaining.size());
  argv[argc] = nullptr;
}

#ifdef HPCTRAIN_HAVE_MPI
/// MPI_Init_thread(MPI_THREAD_MULTIPLE) unless MPI is up; the thread level MPI provided, and
/// whether this call initialised MPI.
void start_mpi(int& argc, char**& argv, int& thread_level, bool& owns_mpi) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) {
    MPI_Query_thread(&thread_level);
  } else {
    const int rc = MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &thread_level);
    HPCTRAIN_REQUIRE(rc == MPI_SUCCESS, "MPI_Init_thread failed");
    owns_mpi = true;
  }
}

void finalize_mpi() noexcept {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}
#else
void start_mpi(int&, char**&, int&, bool&) {}  // one process: no MPI to start
void finalize_mpi() noexcept {}
#endif

}  // namespace

void Environment::start(int& argc, char**& argv) {
  start_mpi(argc, argv, thread_level_, owns_mpi_);
  const NodePlace node = place_on_this_node();
  ComputeThreads t = choose_compute_threads(node.size, cores_in_affinity_mask(),
                                            static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
  set_blas_threads(t.per_rank);
  applied_threads() = t;
  if (!Kokkos::is_initialized()) {
    try {
      const DeviceChoice d = choose_device(node.rank, node.size, gpu_device_count(),
                                           std::getenv("HPCTRAIN_DEVICE_ID"), argv_names_device(argc, argv));
      applied_device() = d;
      initialize_kokkos_without_help(argc, argv, d.device);
    } catch (...) {
      if (owns_mpi_) finalize_mpi();
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
  if (owns_mpi_) finalize_mpi();
}

}  // namespace hpctrain
