// Environment: initialises MPI then Kokkos, finalises both in reverse. Runs once per process.
#include "hpctrain/core/environment.hpp"

#include <Kokkos_Core.hpp>
#include <gtest/gtest.h>
#ifdef HPCTRAIN_HAVE_MPI
#include <mpi.h>
#endif

#include <cstdlib>
#include <string>

#ifdef HPCTRAIN_HAVE_MPI
TEST(Environment, InitialisesAndFinalisesMpiAndKokkos) {
  int mpi_up = 0, mpi_down = 0;
  {
    hpctrain::Environment env;
    MPI_Initialized(&mpi_up);
    EXPECT_EQ(mpi_up, 1);
    EXPECT_TRUE(Kokkos::is_initialized());
    EXPECT_TRUE(env.owns_mpi());
    EXPECT_TRUE(env.owns_kokkos());
    EXPECT_GE(env.mpi_thread_level(), MPI_THREAD_SINGLE);
    {
      hpctrain::Environment nested;  // finds both up: owns neither, finalises nothing
      EXPECT_FALSE(nested.owns_mpi());
      EXPECT_FALSE(nested.owns_kokkos());
    }
    EXPECT_TRUE(Kokkos::is_initialized());
    Kokkos::View<float*> v("v", 4);
    EXPECT_EQ(v.extent(0), 4u);
  }
  EXPECT_FALSE(Kokkos::is_initialized());
  MPI_Finalized(&mpi_down);
  EXPECT_EQ(mpi_down, 1);
}
#else
// Without MPI (HPCTRAIN_ENABLE_MPI=OFF) the Environment is Kokkos alone, one process of one.
TEST(Environment, InitialisesAndFinalisesKokkosWithoutMpi) {
  {
    hpctrain::Environment env;
    EXPECT_TRUE(Kokkos::is_initialized());
    EXPECT_FALSE(env.owns_mpi());
    EXPECT_TRUE(env.owns_kokkos());
    EXPECT_EQ(env.mpi_thread_level(), 0);
    EXPECT_EQ(hpctrain::compute_threads().ranks_on_node, 1);
    {
      hpctrain::Environment nested;  // finds Kokkos up: finalises nothing
      EXPECT_FALSE(nested.owns_kokkos());
    }
    EXPECT_TRUE(Kokkos::is_initialized());
    Kokkos::View<float*> v("v", 4);
    EXPECT_EQ(v.extent(0), 4u);
  }
  EXPECT_FALSE(Kokkos::is_initialized());
}
#endif

namespace {

/// Sets (or, with nullptr, unsets) an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) setenv(name, value, 1); else unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_.empty()) unsetenv(name_); else setenv(name_, old_.c_str(), 1);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::string old_;
};

}  // namespace

TEST(ComputeThreads, PolicyOrder) {
  ScopedEnv a("HPCTRAIN_THREADS_PER_RANK", nullptr), b("OMP_NUM_THREADS", nullptr),
      c("OPENBLAS_NUM_THREADS", nullptr);
  // Unbound (affinity = all 8 cores): cores / ranks on the node, at least 1.
  EXPECT_EQ(hpctrain::choose_compute_threads(2, 8, 8).per_rank, 4);
  EXPECT_EQ(hpctrain::choose_compute_threads(3, 8, 8).per_rank, 2);
  EXPECT_EQ(hpctrain::choose_compute_threads(16, 8, 8).per_rank, 1);
  EXPECT_EQ(hpctrain::choose_compute_threads(1, 2, 2).source, "cores / ranks on this node");
  // Bound by the launcher to fewer cores than the node has: those cores.
  const auto bound = hpctrain::choose_compute_threads(4, 2, 8);
  EXPECT_EQ(bound.per_rank, 2);
  EXPECT_EQ(bound.source, "the cores this rank is bound to");
  {
    ScopedEnv omp("OMP_NUM_THREADS", "3");
    EXPECT_EQ(hpctrain::choose_compute_threads(2, 8, 8).per_rank, 3);
    ScopedEnv ours("HPCTRAIN_THREADS_PER_RANK", "5");  // ours wins over OMP_NUM_THREADS
    const auto t = hpctrain::choose_compute_threads(2, 8, 8);
    EXPECT_EQ(t.per_rank, 5);
    EXPECT_EQ(t.source, "HPCTRAIN_THREADS_PER_RANK");
    EXPECT_EQ(hpctrain::describe(t),
              "5 threads per rank (2 ranks on this node, 8 cores usable; from HPCTRAIN_THREADS_PER_RANK)");
  }
  {
    ScopedEnv bad("HPCTRAIN_THREADS_PER_RANK", "two");
    EXPECT_ANY_THROW(hpctrain::choose_compute_threads(1, 2, 2));
    ScopedEnv zero("HPCTRAIN_THREADS_PER_RANK", "0");
    EXPECT_ANY_THROW(hpctrain::choose_compute_threads(1, 2, 2));
  }
}

// One rank per GPU: the device is the local rank modulo the GPUs, unless the command line names
// one for Kokkos or HPCTRAIN_DEVICE_ID does; a host build (no GPUs) chooses nothing.
TEST(DeviceChoice, PolicyOrder) {
  using hpctrain::choose_device;
  const auto none = choose_device(3, 4, 0, "1", false);
  EXPECT_EQ(none.device, -1);
  EXPECT_EQ(hpctrain::describe(none), "");
  for (int local = 0; local < 8; ++local) {
    const auto d = choose_device(local, 8, 4, nullptr, false);
    EXPECT_EQ(d.device, local % 4) << local;
    EXPECT_EQ(d.source, "local rank");
    EXPECT_NE(d.warning.find("8 ranks on this node share 4 GPUs"), std::string::npos) << d.warning;
  }
  const auto one_each = choose_device(1, 2, 2, "", false);
  EXPECT_EQ(one_each.device, 1);
  EXPECT_TRUE(one_each.warning.empty());
  EXPECT_EQ(hpctrain::describe(one_each), "cuda:1 of 2 GPUs (local rank)");
  const auto env = choose_device(1, 2, 4, "3", false);
  EXPECT_EQ(env.device, 3);
  EXPECT_EQ(env.source, "HPCTRAIN_DEVICE_ID");
  const auto argv = choose_device(1, 2, 4, "3", true);  // the command line wins; Kokkos applies it
  EXPECT_EQ(argv.device, -1);
  EXPECT_EQ(hpctrain::describe(argv), "as the command line's --kokkos-device-id says, of 4 GPUs");
  for (const char* bad : {"4", "-1", "x", "1.5"}) {
    try {
      choose_device(0, 1, 4, bad, false);
      ADD_FAILURE() << "HPCTRAIN_DEVICE_ID=" << bad << " was accepted";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("HPCTRAIN_DEVICE_ID='") + bad +
                                           "': expected a GPU id from 0 to 3 (this process sees 4 GPUs)"),
                std::string::npos)
          << e.what();
    }
  }
}

// In this (host) build the Environment chose no device, and the start-up line says nothing.
TEST(DeviceChoice, HostBuildChoosesNone) {
#if !defined(KOKKOS_ENABLE_CUDA)
  EXPECT_EQ(hpctrain::device_choice().devices, 0);
  EXPECT_EQ(hpctrain::device_choice().device, -1);
#else
  GTEST_SKIP() << "a CUDA build";
#endif
}
