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
class Environment {
 public:
  Environment();
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
