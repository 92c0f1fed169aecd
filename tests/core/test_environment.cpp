// Environment: initialises MPI then Kokkos, finalises both in reverse. Runs once per process.
#include "hpctrain/core/environment.hpp"

#include <Kokkos_Core.hpp>
#include <gtest/gtest.h>
#include <mpi.h>

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
