#include "hpctrain/core/copy_stream.hpp"

#include <string>

#include "hpctrain/base/error.hpp"

#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_runtime.h>
#endif

namespace hpctrain::core {

namespace {
#if defined(KOKKOS_ENABLE_CUDA)
cudaStream_t new_stream() {
  cudaStream_t s = nullptr;
  const cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  HPCTRAIN_REQUIRE(e == cudaSuccess, std::string("CopyStream: cudaStreamCreateWithFlags failed: ") + cudaGetErrorString(e));
  return s;
}
#endif
}  // namespace

#if defined(KOKKOS_ENABLE_CUDA)
CopyStream::CopyStream() : stream_(new_stream()), space_(static_cast<cudaStream_t>(stream_)) {}
#else
CopyStream::CopyStream() = default;
#endif

CopyStream::~CopyStream() {
  space_.fence();
#if defined(KOKKOS_ENABLE_CUDA)
  space_ = ExecSpace();  // the instance lets go of the stream before it is destroyed
  cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
#endif
}

}  // namespace hpctrain::core
