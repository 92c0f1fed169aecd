#pragma once
/// @file
/// Choosing the transport under a communicator: by value, or by HPCTRAIN_TRANSPORT.
///
/// ```
///   hpctrain::coll::Communicator comm(hpctrain::coll::make_default_transport(MPI_COMM_WORLD));
/// ```

#ifdef HPCTRAIN_HAVE_MPI
#include <mpi.h>
#endif

#include <memory>

#include "hpctrain/collectives/transport.hpp"
#include "hpctrain/collectives/tuning.hpp"

namespace hpctrain::coll {

/// True when this build of hpctrain has the UCX transport.
bool ucx_transport_available() noexcept;

#ifdef HPCTRAIN_HAVE_MPI  // a build without MPI (HPCTRAIN_ENABLE_MPI=OFF) has the loopback transport only
/// A transport of `kind` over a duplicate of `comm` (collective over `comm`). Throws
/// hpctrain::Error when `kind` is ucx and hpctrain was built without UCX.
std::unique_ptr<Transport> make_transport(MPI_Comm comm, TransportKind kind);

/// make_transport(comm, Tuning::from_environment().transport): HPCTRAIN_TRANSPORT=mpi|ucx,
/// mpi when unset.
std::unique_ptr<Transport> make_default_transport(MPI_Comm comm);
#endif

}  // namespace hpctrain::coll
