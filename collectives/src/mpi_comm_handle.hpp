#pragma once
// RAII for MPI communicators, shared by the MPI and UCX transports.

#include <mpi.h>

#include <utility>

namespace hpctrain::coll::detail {

/// MPI is initialised and not yet finalised (handles may only be freed then).
inline bool mpi_is_up() noexcept {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

/// Owns an MPI communicator; frees it only while MPI is up. Movable, the source nulled; the
/// destructor never throws.
class CommHandle {
 public:
  explicit CommHandle(MPI_Comm comm = MPI_COMM_NULL) noexcept : comm_(comm) {}
  ~CommHandle() {
    if (comm_ != MPI_COMM_NULL && mpi_is_up()) MPI_Comm_free(&comm_);
  }
  CommHandle(CommHandle&& o) noexcept : comm_(std::exchange(o.comm_, MPI_COMM_NULL)) {}
  CommHandle& operator=(CommHandle&& o) noexcept {
    if (this != &o) {
      CommHandle old(std::move(*this));
      comm_ = std::exchange(o.comm_, MPI_COMM_NULL);
    }
    return *this;
  }
  CommHandle(const CommHandle&) = delete;
  CommHandle& operator=(const CommHandle&) = delete;
  MPI_Comm get() const noexcept { return comm_; }

 private:
  MPI_Comm comm_;
};

}  // namespace hpctrain::coll::detail
