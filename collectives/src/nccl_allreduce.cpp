// The `nccl` algorithm's vendor side (nccl_allreduce.hpp): ncclAllReduce on MemorySpace::device
// buffers, as `mpi` passes through to MPI_Allreduce. Built only with
// HPCTRAIN_ENABLE_CUDA_COLLECTIVES=ON and NCCL found (HPCTRAIN_ENABLE_NCCL): a plain C++
// translation unit against nccl.h and the CUDA runtime, no nvcc needed. Compiled and linked here
// by scripts/check-cuda-collectives.sh; never run on a GPU yet (docs/collectives.md, "Device
// buffers").
//
// Schedule and cost are NCCL's own (its tuner picks ring or tree and the protocol per size over
// NVLink, PCIe or the network); the host adds one stream synchronisation per call.

#include <cuda_runtime.h>
#include <nccl.h>

#include <string>

#include "hpctrain/base/error.hpp"
#include "hpctrain/base/unique_handle.hpp"
#include "hpctrain/collectives/device_memory.hpp"
#include "nccl_allreduce.hpp"

namespace hpctrain::coll {

bool nccl_built() noexcept { return true; }

namespace detail {

static_assert(sizeof(ncclUniqueId) == kNcclIdBytes, "kNcclIdBytes must be NCCL_UNIQUE_ID_BYTES");

namespace {

std::string cuda_error(cudaError_t status) {
  return std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status);
}

void check_cuda(cudaError_t status, const char* what) {
  HPCTRAIN_REQUIRE(status == cudaSuccess, std::string("nccl: ") + what + " failed: " + cuda_error(status));
}

void check_nccl(ncclResult_t result, const char* what) {
  if (result == ncclSuccess) return;
  std::string msg = std::string("nccl: ") + what + " failed: " + ncclGetErrorString(result);
  const char* last = ncclGetLastError(nullptr);  // the argument is unused by NCCL
  if (last != nullptr && *last != '\0') msg += " (" + std::string(last) + ")";
  HPCTRAIN_FAIL(msg);
}

ncclDataType_t nccl_type(DataType t) {
  switch (t) {
    case DataType::f32: return ncclFloat32;
    case DataType::f64: return ncclFloat64;
    case DataType::f16: return ncclFloat16;
    case DataType::bf16: return ncclBfloat16;
    case DataType::i32: return ncclInt32;
    case DataType::i64: return ncclInt64;
  }
  HPCTRAIN_FAIL("nccl: unknown data type");
}

/// avg is NCCL's own (ncclAvg: the sum divided by the rank count on the device), so no host
/// division touches the device buffer.
ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::prod: return ncclProd;
    case ReduceOp::min: return ncclMin;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::avg: return ncclAvg;
  }
  HPCTRAIN_FAIL("nccl: unknown reduction");
}

// After the CUDA runtime has unloaded, cudaStreamDestroy returns an error and does no harm.
using Stream = UniqueHandle<PointerHandleTraits<cudaStream_t, &cudaStreamDestroy>>;
// ncclCommDestroy waits for the communicator's outstanding work; every call here has already
// synchronised its stream, so there is none.
using Comm = UniqueHandle<PointerHandleTraits<ncclComm_t, &ncclCommDestroy>>;

/// The CUDA device of `p`; or why `p` is not device memory ("" when it is).
std::string device_of(const void* p, const char* which, int& device) {
  cudaPointerAttributes attr{};
  const cudaError_t status = cudaPointerGetAttributes(&attr, p);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky: clear it so the next call does not report it
    return std::string("the ") + which + " buffer is not CUDA memory (cudaPointerGetAttributes: " +
           cuda_error(status) + ")";
  }
  if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged) {
    return std::string("the ") + which + " buffer is host memory, not CUDA device memory (cudaMalloc)";
  }
  device = attr.device;
  return "";
}

}  // namespace

class NcclComm {
 public:
  NcclComm(const ncclUniqueId& id, int rank, int size, int device) : device_(device) {
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    cudaStream_t s = nullptr;
    check_cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    stream_ = Stream(s);
    ncclComm_t c = nullptr;
    check_nccl(ncclCommInitRank(&c, size, id, rank), "ncclCommInitRank");
    comm_ = Comm(c);
  }

  void allreduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op) {
    int send_device = device_, recv_device = device_;
    std::string problem = device_of(send, "send", send_device);
    if (problem.empty()) problem = device_of(recv, "receive", recv_device);
    HPCTRAIN_REQUIRE(problem.empty() && send_device == device_ && recv_device == device_,
                     "nccl: this communicator works on CUDA device " + std::to_string(device_) + "; " +
                         (problem.empty() ? "the buffers lie on devices " + std::to_string(send_device) + " and " +
                                                std::to_string(recv_device)
                                          : problem));
    // The current device is per thread, and the progress thread runs iallreduce.
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    check_nccl(ncclAllReduce(send, recv, count, nccl_type(type), nccl_op(op), comm_.get(), stream_.get()),
               "ncclAllReduce");
    check_cuda(cudaStreamSynchronize(stream_.get()), "cudaStreamSynchronize after ncclAllReduce");
  }

 private:
  int device_;
  // Destroyed in reverse: the communicator before the stream it was used on.
  Stream stream_;
  Comm comm_;
};

void NcclCommDelete::operator()(NcclComm* comm) const noexcept { delete comm; }

std::string nccl_build_problem() { return ""; }

std::string nccl_local_problem(const void* send, const void* recv, int& device) {
  int devices = 0;
  const cudaError_t status = cudaGetDeviceCount(&devices);
  if (status != cudaSuccess || devices == 0) {
    (void)cudaGetLastError();
    return "no CUDA device (cudaGetDeviceCount: " + (status != cudaSuccess ? cuda_error(status) : "0 devices") + ")";
  }
  std::string problem = device_of(send, "send", device);
  if (!problem.empty() || recv == send) return problem;
  int recv_device = device;
  problem = device_of(recv, "receive", recv_device);
  if (problem.empty() && recv_device != device) {
    problem = "the send buffer lies on CUDA device " + std::to_string(device) + ", the receive buffer on " +
              std::to_string(recv_device);
  }
  return problem;
}

void nccl_unique_id(void* id) { check_nccl(ncclGetUniqueId(static_cast<ncclUniqueId*>(id)), "ncclGetUniqueId"); }

NcclCommPtr make_nccl_comm(const void* id, int rank, int size, int device) {
  return NcclCommPtr(new NcclComm(*static_cast<const ncclUniqueId*>(id), rank, size, device));
}

void nccl_allreduce(NcclComm& comm, const void* send, void* recv, std::size_t count, DataType type, ReduceOp op) {
  comm.allreduce(send, recv, count, type, op);
}

}  // namespace detail
}  // namespace hpctrain::coll
