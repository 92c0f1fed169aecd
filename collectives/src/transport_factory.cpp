#include "hpctrain/collectives/transport_factory.hpp"

#include "hpctrain/base/error.hpp"
#ifdef HPCTRAIN_HAVE_MPI
#include "hpctrain/collectives/mpi_transport.hpp"
#include "hpctrain/collectives/ucx_transport.hpp"
#endif

namespace hpctrain::coll {

bool ucx_transport_available() noexcept {
#ifdef HPCTRAIN_HAVE_UCX
  return true;
#else
  return false;
#endif
}

#ifdef HPCTRAIN_HAVE_MPI
std::unique_ptr<Transport> make_transport(MPI_Comm comm, TransportKind kind) {
  switch (kind) {
    case TransportKind::mpi: return make_mpi_transport(comm);
    case TransportKind::ucx:
#ifdef HPCTRAIN_HAVE_UCX
      return make_ucx_transport(comm);
#else
      HPCTRAIN_FAIL(
          "transport 'ucx' (HPCTRAIN_TRANSPORT=ucx) requested, but this hpctrain was built without "
          "UCX (configure with -DHPCTRAIN_ENABLE_UCX=ON and UCX >= 1.12 installed)");
#endif
  }
  HPCTRAIN_FAIL("make_transport: unknown transport kind");
}

std::unique_ptr<Transport> make_default_transport(MPI_Comm comm) {
  return make_transport(comm, Tuning::from_environment().transport);
}
#endif  // HPCTRAIN_HAVE_MPI

}  // namespace hpctrain::coll
