#pragma once
#include <string>

/// @file
/// The one object a `main` creates: MPI, then Kokkos; torn down in reverse order.

namespace hpctrain {

/// RAII owner of the MPI and Kokkos runtimes.
///
/// The constructor calls `MPI_Init_thread(MPI_THREAD_MULTIPLE)` unless MPI is already
/// initialised, then `Kokkos::initialize` (which consumes `--kokkos-*` arguments) unless Kokkos
/// is already up. The destructor finalises only what this object initialised, Kokkos first,
/// and never throws. Create exactly one, in `main`, before any View exists; destroy it after
/// every View is gone. After MPI is up it sets each rank's compute thread count
/// (choose_compute_threads) before Kokkos starts. In a build without MPI (HPCTRAIN_ENABLE_MPI=OFF)
/// there is no MPI to start: the process is rank 0 of 1 and local rank 0 of 1 on its node
/// (one GPU, chosen by choose_device), mpi_thread_level() is 0 and owns_mpi() false.
/// OpenBLAS picks its kernels when it loads, from the CPU model; a CPU newer than the OpenBLAS
/// build (Debian 12's 0.3.21 on Sapphire/Emerald Rapids, say) gets the generic "Prescott"
/// kernels, several times slower. Call first thing in main: when OpenBLAS chose such generic
/// kernels on a CPU with AVX-512 (or AVX2), it re-executes the program once with
/// OPENBLAS_CORETYPE=SkylakeX (or Haswell). A user's OPENBLAS_CORETYPE, or
/// HPCTRAIN_KEEP_BLAS_CORETYPE=1, is respected. Returns (doing nothing) when not applicable.
void choose_openblas_kernels(char** argv);

/// Sets the compute libraries' thread count at run time: OpenBLAS (openblas_set_num_threads)
/// and the OpenMP runtime oneDNN runs on (omp_set_num_threads, for the calling thread), both
/// found with dlsym so any BLAS links. Returns OpenBLAS's count in force afterwards, or -1 when
/// the BLAS is not OpenBLAS (OpenMP is still set). Deterministic training uses 1: oneDNN's
/// weight gradient splits its batch reduction by thread count, and the split changes the bits.
int set_blas_threads(int threads);
/// The BLAS library's current thread count (OpenBLAS), or -1 when the BLAS is not OpenBLAS.
int blas_threads();

/// The thread count of hpctrain's own kernels whose bits do not depend on it (libxsmm's column
/// blocks, the element-wise host loops, the optimiser; tests compare 1 and 2 threads bit for
/// bit) while a SingleThreadedLibraries holds the others at one; 0 otherwise, when they run on
/// the OpenMP runtime's count (omp_get_max_threads), which set_blas_threads sets.
int held_kernel_threads() noexcept;

/// Deterministic training's threads, for the duration of a run: OpenBLAS and oneDNN, whose
/// bits depend on their thread count (oneDNN splits a weight gradient's batch reduction by it),
/// on one thread (set_blas_threads(1)); hpctrain's thread-count-independent kernels keep the
/// rank's threads (held_kernel_threads). Restores both afterwards. Not nested; one at a time.
class SingleThreadedLibraries {
 public:
  SingleThreadedLibraries();
  ~SingleThreadedLibraries();
  SingleThreadedLibraries(const SingleThreadedLibraries&) = delete;
  SingleThreadedLibraries& operator=(const SingleThreadedLibraries&) = delete;
  /// OpenBLAS's count in force (1), or -1 when the BLAS is not OpenBLAS.
  int blas_threads() const noexcept { return blas_; }
  /// The threads of the thread-count-independent kernels (the rank's).
  int kernel_threads() const noexcept { return kernels_; }

 private:
  int previous_blas_ = 0, blas_ = 0, kernels_ = 1;
};

/// How many threads each rank's compute libraries use, and why (the Environment decides once).
struct ComputeThreads {
  int per_rank = 1;         ///< threads for OpenBLAS and oneDNN (OpenMP) on this rank
  int ranks_on_node = 1;    ///< ranks sharing this node (MPI_COMM_TYPE_SHARED)
  int cores_usable = 1;     ///< cores in this process's affinity mask
  std::string source;       ///< what decided: "HPCTRAIN_THREADS_PER_RANK", "OMP_NUM_THREADS", ...
};

/// The thread policy: HPCTRAIN_THREADS_PER_RANK if set; else OMP_NUM_THREADS (or
/// OPENBLAS_NUM_THREADS) if set, left to the libraries; else, when the launcher bound the rank
/// to fewer cores than the node has (`mpirun --bind-to core`, `srun --cpus-per-task`), the cores
/// it was bound to; else the node's cores divided by its ranks (at least 1), so P ranks never
/// start P x cores threads. Pure: the Environment applies the result.
ComputeThreads choose_compute_threads(int ranks_on_node, int cores_usable, int cores_online);

/// Overrides the Environment's choice on this rank (as HPCTRAIN_THREADS_PER_RANK would):
/// applies `threads` (>= 1) with set_blas_threads and records `source` for describe().
void set_threads_per_rank(int threads, const std::string& source);

/// The choice the Environment made and applied (per_rank 0 before any Environment).
const ComputeThreads& compute_threads();

/// One line for the start of a run: "1 thread per rank (2 ranks on this node, 2 cores: ...)".
std::string describe(const ComputeThreads& t);

/// Which GPU a rank uses, and why. Decided once by the Environment before Kokkos starts, in
/// builds whose Kokkos has a GPU back end (device_count > 0); one rank per GPU is the model.
struct DeviceChoice {
  int device = -1;      ///< the device id handed to Kokkos (--kokkos-device-id); -1: none chosen
  int devices = 0;      ///< GPUs this process sees (CUDA_VISIBLE_DEVICES applied)
  std::string source;   ///< what decided: "--kokkos-device-id", "HPCTRAIN_DEVICE_ID", "local rank"
  std::string warning;  ///< non-empty when ranks will share a GPU (more ranks on the node than GPUs)
};

/// The device policy: a device the command line gives Kokkos (`argv_names_device`:
/// --kokkos-device-id, --kokkos-device or --kokkos-num-devices) is left to Kokkos; else
/// HPCTRAIN_DEVICE_ID (`device_env`, an id below `devices`; anything else is refused with the
/// value and the count); else `local_rank` % `devices` (MPI_COMM_TYPE_SHARED's rank), with a
/// warning when the node has more ranks than GPUs. No GPUs (`devices` 0, a host build): no choice.
/// Pure: the Environment applies the result.
DeviceChoice choose_device(int local_rank, int ranks_on_node, int devices, const char* device_env,
                           bool argv_names_device);

/// The choice the Environment made (device -1 and devices 0 in a build without a GPU back end).
const DeviceChoice& device_choice();

/// One line for the start of a run ("cuda:1 of 2 GPUs (local rank 1 of 2)"); empty without a choice.
std::string describe(const DeviceChoice& d);

class Environment {
 public:
  Environment();
  /// MPI_Init_thread, then Kokkos::initialize on the arguments; both may remove the arguments
  /// they consume. Kokkos never sees --help or -h (they stay in argv for the program's own
  /// parser), so a program's help is not preceded by Kokkos's.
  Environment(int& argc, char**& argv);
  ~Environment();
  Environment(const Environment&) = delete;
  Environment& operator=(const Environment&) = delete;
  Environment(Environment&&) = delete;
  Environment& operator=(Environment&&) = delete;

  /// The thread level MPI provided (MPI_THREAD_*), whoever initialised it.
  int mpi_thread_level() const noexcept { return thread_level_; }
  bool owns_mpi() const noexcept { return owns_mpi_; }
  bool owns_kokkos() const noexcept { return owns_kokkos_; }

 private:
  void start(int& argc, char**& argv);

  int thread_level_ = 0;
  bool owns_mpi_ = false;
  bool owns_kokkos_ = false;
};

}  // namespace hpctrain
