#pragma once
// MPI pieces shared by the MPI and UCX transports: the communicator handle, the node map and
// node shared memory.

#include <mpi.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "hpctrain/base/mpi_error.hpp"
#include "hpctrain/base/mpi_handle.hpp"
#include "hpctrain/collectives/transport.hpp"

namespace hpctrain::coll::detail {

using ::hpctrain::mpi_is_up;

/// Owns an MPI communicator; frees it only while MPI is up (hpctrain/base/mpi_handle.hpp).
using CommHandle = ::hpctrain::MpiCommHandle;

/// Transport::world_rank for `comm`: `rank` of `comm` in MPI_COMM_WORLD (MPI_Group_translate_ranks,
/// local); `rank` itself when MPI is down or the rank is not in the world group.
int mpi_world_rank(MPI_Comm comm, int rank) noexcept;
/// Transport::shared_memory_domains for the ranks of `comm` (MPI_Comm_split_type with
/// MPI_COMM_TYPE_SHARED; the domain is the lowest rank of `comm` on the same machine).
std::vector<int> mpi_shared_memory_domains(MPI_Comm comm);
/// Transport::shared_memory over `comm`: an MPI-3 shared-memory window
/// (MPI_Win_allocate_shared), locked for passive-target access for its whole life. Throws naming
/// `transport` when the ranks of `comm` are not all on one machine.
std::unique_ptr<SharedSegments> mpi_shared_memory(MPI_Comm comm, std::size_t bytes_per_rank,
                                                  const std::string& transport);

}  // namespace hpctrain::coll::detail
