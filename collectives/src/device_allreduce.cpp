// All-reduce of MemorySpace::device buffers (docs/collectives.md, "Device buffers"): pass-through
// to a device-aware vendor all-reduce (`mpi` over CUDA-aware MPI, `nccl`), else the staging
// pipeline below. The reductions of staged chunks run on the host (the host all-reduce of
// run_allreduce); a CUDA build that reduces on the device would replace `reduce_chunk` with a
// device-side algorithm over device-aware transfers.

#include <algorithm>
#include <array>
#include <cstring>
#include <exception>
#include <string>

#ifdef HPCTRAIN_HAVE_MPI
#include <mpi.h>
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif
#endif

#include "communicator_impl.hpp"
#include "hpctrain/base/error.hpp"
#include "hpctrain/collectives/device_memory.hpp"
#include "nccl_allreduce.hpp"
#include "vendor_call_watchdog.hpp"

namespace hpctrain::coll {

namespace detail {

std::string nccl_what(const char* op) { return std::string(op) + ": algorithm 'nccl' (ncclAllReduce)"; }

void require_nccl_built(const char* op) {
  const std::string problem = nccl_build_problem();
  HPCTRAIN_REQUIRE(problem.empty(), nccl_what(op) + ": " + problem);
}

void refuse_nccl_on_host(const char* op) {
  require_nccl_built(op);
  HPCTRAIN_FAIL(nccl_what(op) + " needs device buffers (MemorySpace::device, CUDA memory); these are host "
                                "buffers: use another algorithm for host memory");
}

}  // namespace detail

std::shared_ptr<void> DeviceMemory::allocate_staging(std::size_t bytes) {
  return std::shared_ptr<void>(new std::byte[std::max<std::size_t>(bytes, 1)],
                               [](void* p) { delete[] static_cast<std::byte*>(p); });
}

bool mpi_transport_cuda_aware() {
#if defined(HPCTRAIN_HAVE_MPI) && defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  return MPIX_Query_cuda_support() == 1;
#else
  return false;  // no MPI, an MPI library without CUDA support, or no query at all
#endif
}

namespace {

/// The staging pipeline over one call's chunks. Chunk k uses staging buffer and stream k % 2;
/// copies on a stream run in order, so chunk k's copy back to the device is done before chunk
/// k+2's copy to the host overwrites the same buffer.
///
///   stream 0:  D2H 0 ........ H2D 0 D2H 2 ........ H2D 2
///   stream 1:        D2H 1 ............ H2D 1 D2H 3 ...
///   host:          [reduce 0]     [reduce 1]     [reduce 2] ...
///
/// A failed copy does not stop the call: this rank keeps taking part in every chunk's host
/// all-reduce (so no peer hangs), issues no more copies, and reports the failure in the final
/// agreement.
class StagingPipeline {
 public:
  StagingPipeline(DeviceMemory& dev, std::shared_ptr<void>* staging, std::size_t chunk_elems, std::size_t elem)
      : dev_(dev), staging_(staging), chunk_elems_(chunk_elems), elem_(elem) {}

  template <class Reduce>
  void run(const void* send, void* recv, std::size_t count, Reduce&& reduce_chunk) {
    const std::size_t chunks = (count + chunk_elems_ - 1) / chunk_elems_;
    try {
      to_host(send, count, 0);
      for (std::size_t k = 0; k < chunks; ++k) {
        const int s = static_cast<int>(k % 2);
        sync(s);  // chunk k is on the host (and chunk k-2's copy back is done)
        if (k + 1 < chunks) to_host(send, count, k + 1);
        reduce_chunk(k, buffer(k), length(count, k));
        issue([&] { dev_.copy_to_device(at(recv, k), buffer(k), length(count, k) * elem_, s); });
      }
    } catch (...) {
      sync(0), sync(1);  // no copy may outlive the call (the buffers are the caller's)
      throw;
    }
    sync(0), sync(1);
  }
  std::exception_ptr failure() const { return failure_; }

 private:
  void to_host(const void* send, std::size_t count, std::size_t k) {
    if (k * chunk_elems_ >= count) return;
    issue([&] {
      dev_.copy_to_host(buffer(k), at(const_cast<void*>(send), k), length(count, k) * elem_, static_cast<int>(k % 2));
    });
  }
  void* buffer(std::size_t k) const { return staging_[k % 2].get(); }
  void* at(void* base, std::size_t k) const { return static_cast<std::byte*>(base) + k * chunk_elems_ * elem_; }
  std::size_t length(std::size_t count, std::size_t k) const { return std::min(chunk_elems_, count - k * chunk_elems_); }
  template <class F>
  void issue(F&& f) {
    if (failure_) return;
    try {
      f();
    } catch (...) {
      failure_ = std::current_exception();
    }
  }
  void sync(int s) {
    try {
      dev_.synchronize(s);
    } catch (...) {
      if (!failure_) failure_ = std::current_exception();
    }
  }

  DeviceMemory& dev_;
  std::shared_ptr<void>* staging_;
  std::size_t chunk_elems_, elem_;
  std::exception_ptr failure_;
};

std::string message_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "unknown error";
  }
}

}  // namespace

std::size_t Communicator::Impl::device_chunks(std::size_t count, DataType type) const noexcept {
  const std::size_t chunk = std::max<std::size_t>(1, tuning.device_chunk_bytes / size_of(type));
  return (count + chunk - 1) / chunk;
}

int Communicator::Impl::highest_failing_rank(bool failed, std::uint64_t seq) {
  std::int32_t highest = failed ? rank() + 1 : 0;
  run_allreduce(&highest, &highest, 1, DataType::i32, ReduceOp::max, Algorithm::recursive_doubling, seq);
  return highest - 1;
}

void Communicator::Impl::create_nccl(const void* send, const void* recv, std::uint64_t seq) {
  int device = -1;
  std::string problem = detail::nccl_local_problem(send, recv, device);
  std::array<std::int64_t, detail::kNcclIdBytes / sizeof(std::int64_t)> id{};
  if (problem.empty() && rank() == 0) {
    try {
      detail::nccl_unique_id(id.data());
    } catch (const std::exception& e) {
      problem = e.what();
    }
  }
  const int failing = highest_failing_rank(!problem.empty(), seq);
  HPCTRAIN_REQUIRE(failing < 0, detail::nccl_what("allreduce") + " cannot run on rank " + std::to_string(failing) +
                                    " (the highest rank that cannot); on this rank: " +
                                    (problem.empty() ? std::string("it could") : problem));
  run_broadcast(id.data(), id.size(), DataType::i64, 0, seq + 1);
  const detail::VendorCallWatch watch({"ncclCommInitRank", "allreduce(nccl) set-up", seq + 1, 0, DataType::f32, size()},
                                      tuning.timeout_s);
  nccl = detail::make_nccl_comm(id.data(), rank(), size(), device);
}

void Communicator::Impl::run_nccl_allreduce(const void* send, void* recv, std::size_t count, DataType type,
                                            ReduceOp op, std::uint64_t seq) {
  if (!nccl) create_nccl(send, recv, seq);
  const detail::VendorCallWatch watch({"ncclAllReduce", "allreduce(nccl)", seq, count, type, size()}, tuning.timeout_s);
  detail::nccl_allreduce(*nccl, send, recv, count, type, op);
}

void Communicator::Impl::run_device_allreduce(const void* send, void* recv, std::size_t count, DataType type,
                                              ReduceOp op, Algorithm algo, std::uint64_t seq) {
  if (count == 0) return;
  if (algo == Algorithm::nccl) {
    run_nccl_allreduce(send, recv, count, type, op, seq);
    return;
  }
  // `avg` stages: the MPI transport divides MPI_Allreduce's sum on the host, which would read
  // device memory.
  if (algo == Algorithm::mpi && device->transport_can_read() && op != ReduceOp::avg) {
    run_allreduce(send, recv, count, type, op, algo, seq);  // the vendor library reads the device
    return;
  }
  const std::size_t elem = size_of(type);
  const std::size_t chunk_elems = std::max<std::size_t>(1, tuning.device_chunk_bytes / elem);
  if (staging_bytes < chunk_elems * elem) {
    for (auto& b : staging) b = device->allocate_staging(chunk_elems * elem);
    staging_bytes = chunk_elems * elem;
  }
  StagingPipeline pipeline(*device, staging, chunk_elems, elem);
  pipeline.run(send, recv, count, [&](std::size_t k, void* buf, std::size_t n) {
    run_allreduce(buf, buf, n, type, op, algo, seq + k);  // the CUDA seam: a device reduction
  });
  // One agreement per call, so a copy that failed on any rank fails the call on every rank.
  const int failing = highest_failing_rank(pipeline.failure() != nullptr, seq + device_chunks(count, type));
  if (failing < 0) return;
  HPCTRAIN_FAIL("allreduce(count=" + std::to_string(count) + ", " + std::string(to_string(type)) +
                ", device memory '" + device->name() + "'): a device copy failed on rank " +
                std::to_string(failing) + " (the highest rank with a failure); on this rank: " +
                (pipeline.failure() ? message_of(pipeline.failure()) : std::string("the copies succeeded")));
}

}  // namespace hpctrain::coll
