#pragma once
/// @file
/// Host-to-device copies that overlap the compute: a CopyStream is an execution space instance of
/// its own (a CUDA stream in a CUDA build) and pinned host staging for what it copies. The
/// trainer starts the next batch's copy on it before the current batch's kernels run
/// (train::DeviceBatch::start_load_rows); in a host build, where the model reads host memory,
/// there is nothing to overlap: the copy is the direct one, done when the call returns.

#include <Kokkos_Core.hpp>

#include <cstddef>

#include "hpctrain/core/tensor.hpp"

namespace hpctrain::core {

/// Host memory the device copies from asynchronously: CUDA's pinned host memory in a CUDA build
/// (a copy from pageable memory is synchronous), host memory otherwise.
#if defined(KOKKOS_ENABLE_CUDA)
using StagingSpace = Kokkos::CudaHostPinnedSpace;
#else
using StagingSpace = Kokkos::HostSpace;
#endif

/// Whether the model's memory is the host's (no copy to overlap).
constexpr bool memory_is_host() { return Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible; }

class CopyStream {
 public:
  CopyStream();   ///< a stream of its own in a CUDA build; the default instance otherwise
  ~CopyStream();  ///< waits for its copies, then releases the stream
  CopyStream(const CopyStream&) = delete;
  CopyStream& operator=(const CopyStream&) = delete;

  /// The instance to pass to Kokkos::deep_copy(space, dst, src).
  const ExecSpace& space() const { return space_; }
  /// Blocks until every copy started on it has finished.
  void wait() const { space_.fence(); }

 private:
  void* stream_ = nullptr;  ///< cudaStream_t in a CUDA build
  ExecSpace space_;
};

/// `staging` resized (grow only, contents dropped) to at least `n` elements.
template <class T>
void reserve_staging(Kokkos::View<T*, StagingSpace>& staging, std::size_t n) {
  if (staging.extent(0) < n) staging = Kokkos::View<T*, StagingSpace>(Kokkos::view_alloc(Kokkos::WithoutInitializing, "hpctrain::staging"), n);
}

}  // namespace hpctrain::core
