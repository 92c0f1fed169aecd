#pragma once
// Internal to hpctrain::collectives: the `nccl` algorithm's vendor side, with NCCL's and CUDA's
// types kept inside its file. nccl_allreduce.cpp implements it in builds with NCCL
// (HPCTRAIN_ENABLE_NCCL); nccl_unavailable.cpp elsewhere, where every entry refuses with the
// reason. The collective part (agreeing that every rank can run it, broadcasting the unique id)
// is Communicator::Impl::run_nccl_allreduce in device_allreduce.cpp.

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "hpctrain/collectives/types.hpp"

namespace hpctrain::coll::detail {

/// One NCCL communicator on one CUDA device and its stream (opaque outside nccl_allreduce.cpp).
class NcclComm;
/// Destroys the communicator (ncclCommDestroy) and its stream; never throws.
struct NcclCommDelete {
  void operator()(NcclComm* comm) const noexcept;
};
using NcclCommPtr = std::unique_ptr<NcclComm, NcclCommDelete>;

/// Bytes of the unique id rank 0 creates and every rank needs (NCCL_UNIQUE_ID_BYTES).
inline constexpr std::size_t kNcclIdBytes = 128;

// ---- device_allreduce.cpp (every build) ----
/// "{op}: algorithm 'nccl' (ncclAllReduce)": the start of every message about it.
std::string nccl_what(const char* op);
/// Throws hpctrain::Error naming `op` when this build has no NCCL.
void require_nccl_built(const char* op);
/// Throws hpctrain::Error naming `op`: `nccl` on host buffers (or, first, a build without NCCL).
[[noreturn]] void refuse_nccl_on_host(const char* op);

// ---- nccl_allreduce.cpp, or nccl_unavailable.cpp in builds without NCCL ----
/// Why this build cannot run `nccl` ("" when it has NCCL).
std::string nccl_build_problem();
/// Why this process cannot run `nccl` on `send`/`recv` ("" when it can): the build has no NCCL,
/// CUDA sees no device (cudaGetDeviceCount), or a buffer is not CUDA device memory. On success
/// `device` is the CUDA device holding the buffers.
std::string nccl_local_problem(const void* send, const void* recv, int& device);
/// Rank 0: a fresh unique id into `id` (kNcclIdBytes).
void nccl_unique_id(void* id);
/// Joins the communicator of `size` ranks named by `id` as `rank`, on `device` (collective:
/// ncclCommInitRank waits for every rank).
NcclCommPtr make_nccl_comm(const void* id, int rank, int size, int device);
/// ncclAllReduce on the communicator's stream, then waits for it (the buffers are the caller's
/// once this returns). `send == recv` is in place. The buffers must lie on the communicator's
/// device; hpctrain::Error otherwise, and on any NCCL or CUDA failure.
void nccl_allreduce(NcclComm& comm, const void* send, void* recv, std::size_t count, DataType type, ReduceOp op);

}  // namespace hpctrain::coll::detail
