// GoogleTest main for tests that use Kokkos: initialises Kokkos around RUN_ALL_TESTS (every
// View a test creates is gone before finalize, because tests own their Views).
#include <Kokkos_Core.hpp>
#include <gtest/gtest.h>

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  Kokkos::initialize(argc, argv);
  const int rc = RUN_ALL_TESTS();
  Kokkos::finalize();
  return rc;
}
