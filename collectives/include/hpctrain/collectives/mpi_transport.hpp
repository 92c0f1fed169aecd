#pragma once
/// @file
/// The MPI point-to-point transport (MPI_Isend/MPI_Irecv on a duplicated communicator).

#include <mpi.h>

#include <memory>
#include <string>

#include "hpctrain/collectives/error.hpp"
#include "hpctrain/collectives/transport.hpp"

namespace hpctrain {
/// The MPI error string of `code`.
std::string mpi_error_string(int code);
}  // namespace hpctrain

/// Throws hpctrain::Error naming the call and MPI's error string unless it returns MPI_SUCCESS.
#define HPCTRAIN_CHECK_MPI(call)                                                          \
  do {                                                                                    \
    const int hpctrain_mpi_rc_ = (call);                                                  \
    if (hpctrain_mpi_rc_ != MPI_SUCCESS)                                                  \
      throw ::hpctrain::Error(std::string(#call) + " failed: " +                          \
                                  ::hpctrain::mpi_error_string(hpctrain_mpi_rc_),         \
                              __FILE__, __LINE__);                                        \
  } while (0)

namespace hpctrain::coll {

/// A transport over a duplicate of `comm` (the caller's communicator is not used for traffic).
/// MPI must be initialised; MPI_THREAD_MULTIPLE is needed for non-blocking collectives to run
/// beside other MPI traffic of the application.
std::unique_ptr<Transport> make_mpi_transport(MPI_Comm comm);

/// The MPI communicator under an MPI transport (for interoperation); MPI_COMM_NULL otherwise.
MPI_Comm mpi_comm_of(const Transport& t) noexcept;

}  // namespace hpctrain::coll
