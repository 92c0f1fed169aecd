// Device buffers (MemorySpace::device) over real processes (np 1..4, the transport
// HPCTRAIN_TRANSPORT selects): the staging pipeline on the stand-in device space against the
// reference and the host path's bits, algorithm mpi included (the stand-in is not device-aware,
// so mpi stages too), and a failed copy on the last rank failing the call on every rank.

#include <gtest/gtest.h>
#include <mpi.h>

#include <string>

#include "device_cases.hpp"
#include "hpctrain/collectives/transport_factory.hpp"

namespace hpctrain::coll {
namespace {

using namespace testing;

TEST(DeviceMpi, MatrixMatchesReferenceAndHostBits) {
  Communicator comm(make_default_transport(MPI_COMM_WORLD), device_test_tuning(Tuning::from_environment()));
  std::vector<Algorithm> algos{Algorithm::ring, Algorithm::recursive_doubling};
  if (comm.transport().name() == "mpi") algos.push_back(Algorithm::mpi);
  run_device_matrix(comm, algos);
}

TEST(DeviceMpi, FailedCopyOnLastRankFailsEveryRank) {
  Communicator comm(make_default_transport(MPI_COMM_WORLD), device_test_tuning(Tuning::from_environment()));
  const int failing = comm.size() - 1;
  const std::string msg = run_failing_copy(comm, failing);
  EXPECT_NE(msg.find("a device copy failed on rank " + std::to_string(failing)), std::string::npos) << msg;
}

// `nccl` refused on every process alike (device_cases.hpp), and MPI still usable afterwards.
TEST(DeviceMpi, NcclIsRefusedOnEveryRankWithTheReason) {
  Communicator comm(make_default_transport(MPI_COMM_WORLD), device_test_tuning(Tuning::from_environment()));
  expect_nccl_refused(comm, Algorithm::nccl);
}

TEST(DeviceMpi, CudaAwareQueryAnswers) {
  // This Open MPI is built without CUDA: the query must say so (and not crash).
  EXPECT_FALSE(mpi_transport_cuda_aware());
}

}  // namespace
}  // namespace hpctrain::coll
