// Rank 1 skips an all-reduce that every other rank enters. With HPCTRAIN_COLL_TIMEOUT_S set,
// the waiting ranks must report which peer they waited for and end the job.
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "hpctrain/base/error.hpp"
#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/collectives/mpi_transport.hpp"

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  try {
    hpctrain::coll::Communicator comm(hpctrain::coll::make_mpi_transport(MPI_COMM_WORLD));
    if (comm.rank() != 1) {
      float x = 1.0f;
      comm.allreduce(&x, 1, hpctrain::coll::ReduceOp::sum, hpctrain::coll::Algorithm::tree);
      std::printf("rank %d: all-reduce completed although rank 1 never joined\n", comm.rank());
    } else {
      std::this_thread::sleep_for(std::chrono::seconds(30));  // longer than the timeout
    }
  } catch (const std::exception& e) {
    hpctrain::abort_job(e, 3);
  }
  MPI_Finalize();
  return 0;
}
