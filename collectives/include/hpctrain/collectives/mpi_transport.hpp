#pragma once
/// @file
/// The MPI point-to-point transport (MPI_Isend/MPI_Irecv on a duplicated communicator).

#ifndef HPCTRAIN_HAVE_MPI
#error "hpctrain/collectives/mpi_transport.hpp needs MPI: this hpctrain was configured with HPCTRAIN_ENABLE_MPI=OFF"
#endif
#include <mpi.h>

#include <memory>
#include <string>

#include "hpctrain/base/mpi_error.hpp"  // HPCTRAIN_CHECK_MPI, mpi_error_string (were declared here)
#include "hpctrain/collectives/transport.hpp"

namespace hpctrain::coll {

/// A transport over a duplicate of `comm` (the caller's communicator is not used for traffic).
/// MPI must be initialised; MPI_THREAD_MULTIPLE is needed for non-blocking collectives to run
/// beside other MPI traffic of the application.
std::unique_ptr<Transport> make_mpi_transport(MPI_Comm comm);

/// The MPI communicator under an MPI transport (for interoperation); MPI_COMM_NULL otherwise.
MPI_Comm mpi_comm_of(const Transport& t) noexcept;

}  // namespace hpctrain::coll
