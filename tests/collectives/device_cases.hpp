#pragma once
// Device-buffer all-reduce cases shared by the loopback and the MPI tests: each rank's input is
// written into StandInDevice memory (the host cannot read it: PROT_NONE), all-reduced with
// MemorySpace::device, copied back and checked against the float64 / exact reference of
// reference.hpp, and its bits against the host path of the same algorithm on the same input.

#include <gtest/gtest.h>

#include <cstring>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/collectives/stand_in_device.hpp"
#include "reference.hpp"

namespace hpctrain::coll::testing {

/// Device staging chunk of the tests: 64 float / 32 double elements, so the sizes below cover
/// one element, part of a chunk, whole chunks and a remainder.
inline constexpr std::size_t kTestChunkBytes = 256;
inline const std::vector<std::size_t>& device_test_counts() {
  static const std::vector<std::size_t> counts{0, 1, 37, 192, 157, 1001};
  return counts;
}

struct DeviceCase {
  DataType type;
  ReduceOp op;
  std::size_t count;
  Algorithm algo;
  bool in_place;
  bool non_blocking;
  std::string describe(int ranks) const {
    return std::string(to_string(type)) + " " + std::string(to_string(op)) + " count=" + std::to_string(count) +
           " algo=" + std::string(to_string(algo)) + (in_place ? " in-place" : "") +
           (non_blocking ? " iallreduce" : "") + " p=" + std::to_string(ranks);
  }
};

/// Runs one case on this rank; returns the number of elements outside the reference bound
/// (first one in `first`) and sets `same_bits_as_host` to whether the result equals the host
/// all-reduce of the same input with the same algorithm bit for bit.
inline std::size_t run_device_case(Communicator& comm, StandInDevice& dev, const DeviceCase& c,
                                   std::string* first, bool* same_bits_as_host) {
  const std::uint64_t seed = 1000 + c.count;
  const std::size_t bytes = c.count * size_of(c.type);
  std::vector<std::byte> input(bytes), output(bytes), host(bytes);
  fill_input(c.type, c.op, seed, comm.rank(), input.data(), c.count);
  void* send = dev.allocate(bytes);
  void* recv = c.in_place ? send : dev.allocate(bytes);
  dev.copy_to_device(send, input.data(), bytes, 0);
  dev.synchronize(0);
  if (c.non_blocking) {
    comm.iallreduce(send, recv, c.count, c.type, c.op, MemorySpace::device, c.algo).wait();
  } else {
    comm.allreduce(send, recv, c.count, c.type, c.op, MemorySpace::device, c.algo);
  }
  dev.copy_to_host(output.data(), recv, bytes, 1);
  dev.synchronize(1);
  if (recv != send) dev.deallocate(recv);
  dev.deallocate(send);
  comm.allreduce(input.data(), host.data(), c.count, c.type, c.op, c.algo);
  *same_bits_as_host = std::memcmp(output.data(), host.data(), bytes) == 0;
  return count_mismatches(c.type, c.op, seed, comm.size(), output.data(), c.count, first);
}

/// Every case of the matrix for `algos` on this rank, as gtest failures. Bits must equal the
/// host path when the vector fits in one chunk (the same call), for integers (exact), and for
/// recursive doubling (each element combined in the same order whatever its offset).
inline void run_device_matrix(Communicator& comm, const std::vector<Algorithm>& algos) {
  StandInDevice dev;
  comm.set_device_memory(std::shared_ptr<DeviceMemory>(&dev, [](DeviceMemory*) {}));
  int variant = 0;
  for (Algorithm algo : algos)
    for (DataType type : {DataType::f32, DataType::f64, DataType::i32})
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::max})
        for (std::size_t count : device_test_counts()) {
          const DeviceCase c{type, op, count, algo, variant % 3 == 1, variant % 4 == 2};
          ++variant;
          std::string first;
          bool same_bits = false;
          EXPECT_EQ(run_device_case(comm, dev, c, &first, &same_bits), 0u) << c.describe(comm.size()) << ": " << first;
          const bool one_chunk = count * size_of(type) <= comm.tuning().device_chunk_bytes;
          const bool order_free = type == DataType::i32 || op == ReduceOp::max || algo == Algorithm::recursive_doubling;
          if (one_chunk || order_free) {
            EXPECT_TRUE(same_bits) << c.describe(comm.size()) << ": bits differ from host path";
          }
        }
  comm.set_device_memory(nullptr);
}

inline Tuning device_test_tuning(Tuning t) {
  t.device_chunk_bytes = kTestChunkBytes;
  t.timeout_s = 60;
  return t;
}

/// Rank `failing` injects a failure into its third copy; every rank must get one clear error
/// naming that rank (not a hang). Returns this rank's error text ("" if none was thrown).
inline std::string run_failing_copy(Communicator& comm, int failing) {
  StandInDevice dev;
  comm.set_device_memory(std::shared_ptr<DeviceMemory>(&dev, [](DeviceMemory*) {}));
  const std::size_t count = 1000;
  void* buf = dev.allocate(count * sizeof(float));
  if (comm.rank() == failing) dev.fail_copy(2);
  std::string message;
  try {
    comm.allreduce(buf, buf, count, DataType::f32, ReduceOp::sum, MemorySpace::device, Algorithm::ring);
  } catch (const std::exception& e) {
    message = e.what();
  }
  dev.deallocate(buf);
  comm.set_device_memory(nullptr);
  return message;
}

/// The text `nccl` is refused with on this rank, or "" when the call was accepted.
inline std::string nccl_refusal(const std::function<void()>& call) {
  try {
    call();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

/// `nccl` where it cannot run, on every rank alike: host buffers (blocking, and non-blocking:
/// refused on the calling thread) and stand-in device memory, which is no CUDA memory (and no
/// DeviceMemory is set: `nccl` needs none). `algo` is Algorithm::nccl, or automatic on a
/// communicator whose tuning forces nccl (HPCTRAIN_ALLREDUCE_ALGO=nccl). Without NCCL in the
/// build each call is refused naming the build; with NCCL, host buffers are refused naming device
/// buffers, and the device call fails on every rank naming the highest rank that cannot run it
/// and this rank's reason (no CUDA device without a GPU; not device memory with one). The
/// communicator stays usable: a ring all-reduce afterwards must give the exact sum.
inline void expect_nccl_refused(Communicator& comm, Algorithm algo) {
  std::vector<float> v(5, 1.0f);
  const std::string host = nccl_refusal([&] {
    comm.allreduce(v.data(), v.data(), v.size(), DataType::f32, ReduceOp::sum, algo);
  });
  const std::string ihost = nccl_refusal([&] {
    (void)comm.iallreduce(v.data(), v.data(), v.size(), DataType::f32, ReduceOp::sum, algo);
  });
  StandInDevice dev;
  void* buf = dev.allocate(v.size() * sizeof(float));
  const std::string device = nccl_refusal([&] {
    comm.allreduce(buf, buf, v.size(), DataType::f32, ReduceOp::sum, MemorySpace::device, algo);
  });
  dev.deallocate(buf);
#ifdef HPCTRAIN_HAVE_NCCL
  for (const std::string& msg : {host, ihost}) {
    EXPECT_NE(msg.find("algorithm 'nccl' (ncclAllReduce) needs device buffers"), std::string::npos) << msg;
  }
  EXPECT_NE(device.find("algorithm 'nccl' (ncclAllReduce) cannot run on rank " + std::to_string(comm.size() - 1)),
            std::string::npos)
      << device;
  EXPECT_TRUE(device.find("no CUDA device (cudaGetDeviceCount") != std::string::npos ||
              device.find("not CUDA device memory") != std::string::npos ||
              device.find("not CUDA memory") != std::string::npos)
      << device;
#else
  const std::string no_build = "algorithm 'nccl' (ncclAllReduce): this build has no NCCL (configure with "
                               "-DHPCTRAIN_ENABLE_CUDA_COLLECTIVES=ON and NCCL installed";
  for (const std::string& msg : {host, ihost, device}) EXPECT_NE(msg.find(no_build), std::string::npos) << msg;
#endif
  for (float& x : v) x = static_cast<float>(comm.rank() + 1);
  comm.allreduce(v.data(), v.data(), v.size(), DataType::f32, ReduceOp::sum, Algorithm::ring);
  for (float x : v) EXPECT_EQ(x, static_cast<float>(comm.size() * (comm.size() + 1) / 2));
}

}  // namespace hpctrain::coll::testing
