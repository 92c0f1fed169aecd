// Uses the installed headers and libraries: an all-reduce and a model built from the registry.
#include <mpi.h>

#include <cstdio>

#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/collectives/mpi_transport.hpp"
#include "hpctrain/core/environment.hpp"
#include "hpctrain/models/registry.hpp"

int main(int argc, char** argv) {
  hpctrain::Environment env(argc, argv);
  hpctrain::coll::Communicator comm(hpctrain::coll::make_mpi_transport(MPI_COMM_WORLD));
  long long ranks = 1;
  std::int64_t v = 1;
  comm.allreduce(&v, 1, hpctrain::coll::ReduceOp::sum, hpctrain::coll::Algorithm::ring);
  ranks = v;
  auto model = hpctrain::models::build_model<float>({{"name", "mlp"}});
  if (comm.rank() == 0) std::printf("downstream: %lld ranks, mlp with %lld parameters\n", ranks,
                                    static_cast<long long>(model->parameter_count()));
  return (ranks == comm.size() && model->parameter_count() == 535818) ? 0 : 1;
}
