// The CUDA DeviceMemory (device_memory.hpp, make_cuda_device_memory): cudaMemcpyAsync on two
// streams of one device, pinned staging buffers from cudaHostAlloc. Built only with
// HPCTRAIN_ENABLE_CUDA_COLLECTIVES=ON (CMake finds the CUDA toolkit); compiled and linked here by
// scripts/check-cuda-collectives.sh, never run on a GPU yet (docs/collectives.md, "Device buffers").

#include <cuda_runtime.h>

#include <string>

#include "hpctrain/base/error.hpp"
#include "hpctrain/collectives/device_memory.hpp"

namespace hpctrain::coll {

namespace {

void check(cudaError_t status, const char* what) {
  HPCTRAIN_REQUIRE(status == cudaSuccess, std::string("cuda device memory: ") + what + " failed: " +
                                              cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")");
}

class CudaDeviceMemory final : public DeviceMemory {
 public:
  CudaDeviceMemory(int device, bool transport_can_read) : device_(device), transport_can_read_(transport_can_read) {
    check(cudaSetDevice(device_), "cudaSetDevice");
    for (auto& s : streams_) check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  ~CudaDeviceMemory() override {
    for (auto s : streams_) {
      cudaStreamSynchronize(s);
      cudaStreamDestroy(s);
    }
  }
  CudaDeviceMemory(const CudaDeviceMemory&) = delete;
  CudaDeviceMemory& operator=(const CudaDeviceMemory&) = delete;

  std::string name() const override { return "cuda:" + std::to_string(device_); }
  void copy_to_host(void* host_dst, const void* device_src, std::size_t bytes, int stream) override {
    copy(host_dst, device_src, bytes, cudaMemcpyDeviceToHost, stream);
  }
  void copy_to_device(void* device_dst, const void* host_src, std::size_t bytes, int stream) override {
    copy(device_dst, host_src, bytes, cudaMemcpyHostToDevice, stream);
  }
  void synchronize(int stream) override { check(cudaStreamSynchronize(at(stream)), "cudaStreamSynchronize"); }
  bool transport_can_read() const override { return transport_can_read_; }
  std::shared_ptr<void> allocate_staging(std::size_t bytes) override {
    void* p = nullptr;
    check(cudaSetDevice(device_), "cudaSetDevice");
    check(cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocPortable), "cudaHostAlloc");
    return std::shared_ptr<void>(p, [](void* q) { cudaFreeHost(q); });
  }

 private:
  cudaStream_t at(int stream) const {
    HPCTRAIN_REQUIRE(stream >= 0 && stream < kStagingStreams,
                     "cuda device memory: stream " + std::to_string(stream) + " out of range");
    return streams_[stream];
  }
  void copy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind, int stream) {
    if (bytes == 0) return;
    // The progress thread issues copies too: the current device is per thread.
    check(cudaSetDevice(device_), "cudaSetDevice");
    check(cudaMemcpyAsync(dst, src, bytes, kind, at(stream)), "cudaMemcpyAsync");
  }

  int device_;
  bool transport_can_read_;
  cudaStream_t streams_[kStagingStreams] = {};
};

}  // namespace

std::shared_ptr<DeviceMemory> make_cuda_device_memory(int device, bool transport_can_read) {
  return std::make_shared<CudaDeviceMemory>(device, transport_can_read);
}

}  // namespace hpctrain::coll
