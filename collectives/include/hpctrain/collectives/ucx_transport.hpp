#pragma once
/// @file
/// The UCX transport: UCP tag send/receive on a worker of its own, bypassing MPI for traffic
/// (MPI is used once, to exchange worker addresses, and by split()).
///
/// Exists only when hpctrain was built with UCX (the compile definition HPCTRAIN_HAVE_UCX is
/// then set for every user of hpctrain::collectives). make_transport()/make_default_transport()
/// in transport_factory.hpp work either way and fail clearly when UCX is asked for but absent.
///
/// Settings: UCX's own environment (UCX_TLS, UCX_NET_DEVICES, ...) as read by ucp_config_read,
/// and the HPCTRAIN_UCX_* knobs of tuning.hpp. See docs/ucx.md.

#ifdef HPCTRAIN_HAVE_MPI  // UCX needs MPI (the worker addresses' exchange)
#include <mpi.h>
#endif

#include <memory>

#include "hpctrain/collectives/transport.hpp"
#include "hpctrain/collectives/tuning.hpp"

namespace hpctrain::coll {

#ifdef HPCTRAIN_HAVE_UCX
/// A UCX transport over the ranks of `comm` (collective over `comm`): ucp_init with the tag
/// feature, one worker, worker addresses exchanged with MPI_Allgatherv over a duplicate of
/// `comm`, endpoints created on first use per peer. Knobs from Tuning::from_environment()
/// (or `tuning`). Throws hpctrain::Error naming the UCX status when UCX cannot initialise.
/// The returned transport's name() is "ucx"; it has no vendor all-reduce (Algorithm::mpi).
std::unique_ptr<Transport> make_ucx_transport(MPI_Comm comm);
std::unique_ptr<Transport> make_ucx_transport(MPI_Comm comm, const Tuning& tuning);
#endif

}  // namespace hpctrain::coll
