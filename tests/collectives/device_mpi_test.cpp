// Device buffers (MemorySpace::device) over real processes (np 1..4, the transport
// HPCTRAIN_TRANSPORT selects): the staging pipeline on the stand-in device space against the
// reference and the host path's bits, algorithm mpi included (the stand-in is not device-aware,
// so mpi stages too), and a failed copy on the last rank failing the call on every rank.

#include <gtest/gtest.h>
#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

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

// A device-aware MPI gets the device pointers only where it computes the whole result: `avg` is
// MPI's sum divided on the host, which would read device memory, so it stages. The stand-in
// claims transport_can_read(); MPI or the division touching its PROT_NONE memory would crash.
TEST(DeviceMpi, AvgThroughDeviceAwareMpiStages) {
  Communicator comm(make_default_transport(MPI_COMM_WORLD), device_test_tuning(Tuning::from_environment()));
  if (comm.transport().name() != "mpi") GTEST_SKIP() << "Algorithm::mpi needs the MPI transport";
  StandInDevice dev;
  dev.set_transport_can_read(true);
  comm.set_device_memory(std::shared_ptr<DeviceMemory>(&dev, [](DeviceMemory*) {}));
  const std::size_t n = 157;  // several chunks of kTestChunkBytes
  std::vector<double> v(n, comm.rank() + 1.0);
  void* buf = dev.allocate(n * sizeof(double));
  dev.copy_to_device(buf, v.data(), n * sizeof(double), 0);
  dev.synchronize(0);
  dev.reset_counters();
  comm.allreduce(buf, buf, n, DataType::f64, ReduceOp::avg, MemorySpace::device, Algorithm::mpi);
  EXPECT_EQ(dev.counters().bytes_to_host, n * sizeof(double));
  dev.copy_to_host(v.data(), buf, n * sizeof(double), 0);
  dev.synchronize(0);
  dev.deallocate(buf);
  comm.set_device_memory(nullptr);
  for (double x : v) EXPECT_EQ(x, (comm.size() + 1) / 2.0);
}

TEST(DeviceMpi, CudaAwareQueryAnswers) {
  // This Open MPI is built without CUDA: the query must say so (and not crash).
  EXPECT_FALSE(mpi_transport_cuda_aware());
}

}  // namespace
}  // namespace hpctrain::coll
