#pragma once
/// @file
/// DeviceMemory: what the collectives need from a device (GPU) memory space, Kokkos-free.
///
/// A Communicator given one (Communicator::set_device_memory) accepts MemorySpace::device
/// buffers in allreduce / iallreduce. It never dereferences a device pointer on the host: it
/// stages chunks through host buffers with the copies below (a double-buffered pipeline, see
/// docs/collectives.md, "Device buffers"), or, when transport_can_read() and the algorithm is
/// `mpi` (the vendor library reduces), passes the pointers through. Algorithm::nccl passes them
/// to NCCL and needs no DeviceMemory (nccl_built() below).
///
/// Implementations: StandInDevice (stand_in_device.hpp: host memory the host cannot touch, for
/// tests on CPU builds) and, in a build with HPCTRAIN_ENABLE_CUDA_COLLECTIVES, the CUDA one
/// (make_cuda_device_memory below).

#include <cstddef>
#include <memory>
#include <string>

namespace hpctrain::coll {

class DeviceMemory {
 public:
  /// The staging pipeline uses streams 0 and 1 (one per staging buffer).
  static constexpr int kStagingStreams = 2;

  virtual ~DeviceMemory() = default;
  /// For error messages ("stand-in", "cuda:0").
  virtual std::string name() const = 0;
  /// Enqueue an asynchronous copy on `stream` (0 <= stream < kStagingStreams); copies on one
  /// stream run in issue order. `host` stays valid and untouched until synchronize(stream).
  virtual void copy_to_host(void* host_dst, const void* device_src, std::size_t bytes, int stream) = 0;
  virtual void copy_to_device(void* device_dst, const void* host_src, std::size_t bytes, int stream) = 0;
  /// Waits for every copy issued on `stream`; throws hpctrain::Error if one of them failed.
  virtual void synchronize(int stream) = 0;
  /// True when the transport may be handed device pointers (CUDA-aware MPI, see
  /// mpi_transport_cuda_aware()). Only Algorithm::mpi uses it: the other algorithms reduce on
  /// the host, so they always stage.
  virtual bool transport_can_read() const { return false; }
  /// A host staging buffer of `bytes` (pinned for CUDA, so copies are asynchronous DMA).
  virtual std::shared_ptr<void> allocate_staging(std::size_t bytes);
};

/// Whether the MPI library reports CUDA support at run time (Open MPI's MPIX_Query_cuda_support
/// from <mpi-ext.h>); false where the MPI library has no such query.
bool mpi_transport_cuda_aware();

/// Whether this build has Algorithm::nccl (HPCTRAIN_ENABLE_CUDA_COLLECTIVES and NCCL found, also
/// the compile definition HPCTRAIN_HAVE_NCCL). It passes MemorySpace::device buffers (cudaMalloc
/// memory) to ncclAllReduce over an NCCL communicator the Communicator creates at its first
/// `nccl` call (rank 0's unique id broadcast through the Communicator) and destroys with itself;
/// it needs no DeviceMemory. Refused with hpctrain::Error naming the reason: in builds without
/// NCCL, on host buffers, and on every rank when any rank's CUDA sees no device or holds a buffer
/// that is not device memory.
bool nccl_built() noexcept;

#ifdef HPCTRAIN_HAVE_CUDA_COLLECTIVES
/// CUDA: cudaMemcpyAsync on two streams of `device`, pinned staging (cudaHostAlloc).
/// `transport_can_read`: pass mpi_transport_cuda_aware() when the communicator runs over MPI.
std::shared_ptr<DeviceMemory> make_cuda_device_memory(int device, bool transport_can_read);
#endif

}  // namespace hpctrain::coll
