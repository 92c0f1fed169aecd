#pragma once
/// @file
/// The one object a `main` creates: MPI, then Kokkos; torn down in reverse order.

namespace hpctrain {

/// RAII owner of the MPI and Kokkos runtimes.
///
/// The constructor calls `MPI_Init_thread(MPI_THREAD_MULTIPLE)` unless MPI is already
/// initialised, then `Kokkos::initialize` (which consumes `--kokkos-*` arguments) unless Kokkos
/// is already up. The destructor finalises only what this object initialised, Kokkos first,
/// and never throws. Create exactly one, in `main`, before any View exists; destroy it after
/// every View is gone.
/// OpenBLAS picks its kernels when it loads, from the CPU model; a CPU newer than the OpenBLAS
/// build (Debian 12's 0.3.21 on Sapphire/Emerald Rapids, say) gets the generic "Prescott"
/// kernels, several times slower. Call first thing in main: when OpenBLAS chose such generic
/// kernels on a CPU with AVX-512 (or AVX2), it re-executes the program once with
/// OPENBLAS_CORETYPE=SkylakeX (or Haswell). A user's OPENBLAS_CORETYPE, or
/// HPCTRAIN_KEEP_BLAS_CORETYPE=1, is respected. Returns (doing nothing) when not applicable.
void choose_openblas_kernels(char** argv);

/// Sets the BLAS library's thread count at run time (OpenBLAS: openblas_set_num_threads, found
/// with dlsym so any BLAS links). Returns the count in force afterwards, or -1 when the BLAS is
/// not OpenBLAS (nothing done). Deterministic training uses 1: OpenBLAS splits a gemm by thread
/// count, and the split changes the bits.
int set_blas_threads(int threads);
/// The BLAS library's current thread count (OpenBLAS), or -1 when the BLAS is not OpenBLAS.
int blas_threads();

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
