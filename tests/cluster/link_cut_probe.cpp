// All-reduces in a loop across the hosts of the namespace cluster until one fails; the link-cut
// test (link_cut.sh) takes a host's fabric link down while this runs. Every rank must then end
// within HPCTRAIN_COLL_TIMEOUT_S (plus the launcher's margin) with a diagnostic naming the peer
// it waited for, through the ordinary path: the collective's timeout, then abort_job.
//
//   link_cut_probe ALGORITHM COUNT MAX_SECONDS
//
// Rank 0 prints "link_cut_probe: running" once the first all-reduce has completed (the cue to
// cut the link) and a line every 50 iterations. Exits 2 when MAX_SECONDS pass without a
// failure (the link was never cut, or the cut went unnoticed), so that case fails the test.
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "hpctrain/base/error.hpp"
#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/collectives/transport_factory.hpp"

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  if (argc != 4) {
    std::fprintf(stderr, "usage: link_cut_probe ALGORITHM COUNT MAX_SECONDS\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  using namespace hpctrain::coll;
  try {
    const Algorithm algo = parse_algorithm(argv[1], "link_cut_probe ALGORITHM");
    const std::size_t count = std::strtoull(argv[2], nullptr, 10);
    const double max_s = std::strtod(argv[3], nullptr);
    const Tuning tuning = Tuning::from_environment();  // HPCTRAIN_COLL_TIMEOUT_S
    Communicator comm(make_default_transport(MPI_COMM_WORLD), tuning);
    std::vector<float> x(count);
    const auto start = std::chrono::steady_clock::now();
    for (long i = 0;; ++i) {
      for (auto& v : x) v = 1.0f;
      comm.allreduce(x.data(), x.size(), ReduceOp::sum, algo);
      HPCTRAIN_REQUIRE(x.front() == static_cast<float>(comm.size()) && x.back() == static_cast<float>(comm.size()),
                       "link_cut_probe: wrong all-reduce result " + std::to_string(x.front()));
      if (comm.rank() == 0 && (i == 0 || i % 50 == 0)) {
        if (i == 0) {
          std::printf("link_cut_probe: running (%s, %zu floats, %d ranks)\n", argv[1], count, comm.size());
        } else {
          std::printf("link_cut_probe: iteration %ld\n", i);
        }
        std::fflush(stdout);
      }
      if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > max_s) {
        std::fprintf(stderr, "link_cut_probe: rank %d: %.0f s of all-reduces without a failure: "
                             "the link was not cut, or the cut went unnoticed\n", comm.rank(), max_s);
        MPI_Abort(MPI_COMM_WORLD, 2);
      }
    }
  } catch (const std::exception& e) {
    hpctrain::abort_job(e, 3);
  }
}
