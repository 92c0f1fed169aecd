#pragma once
// RAII for MPI communicators, shared by the MPI and UCX transports.

#include <mpi.h>

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "hpctrain/base/mpi_error.hpp"
#include "hpctrain/collectives/transport.hpp"

namespace hpctrain::coll::detail {

using ::hpctrain::mpi_is_up;

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

/// Transport::shared_memory_domains for the ranks of `comm` (MPI_Comm_split_type with
/// MPI_COMM_TYPE_SHARED; the domain is the lowest rank of `comm` on the same machine).
std::vector<int> mpi_shared_memory_domains(MPI_Comm comm);
/// Transport::shared_memory over `comm`: an MPI-3 shared-memory window
/// (MPI_Win_allocate_shared), locked for passive-target access for its whole life. Throws naming
/// `transport` when the ranks of `comm` are not all on one machine.
std::unique_ptr<SharedSegments> mpi_shared_memory(MPI_Comm comm, std::size_t bytes_per_rank,
                                                  const std::string& transport);

}  // namespace hpctrain::coll::detail
