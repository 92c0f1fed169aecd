#pragma once
// Shared by the tests that compare gradient strategies' runs (zero_mpi_test.cpp,
// zero_batch_norm_mpi_test.cpp): the largest difference between two parameter vectors, the
// float bound it is held to, and a run on the first ranks of a communicator.

#include <algorithm>
#include <cmath>
#include <vector>

#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/train/trainer.hpp"

namespace hpctrain::testing {

struct Difference {
  double worst = 0;  ///< max |a_i - b_i|
  double scale = 0;  ///< max |a_i|
};
inline Difference compare(const std::vector<float>& a, const std::vector<float>& b) {
  Difference d;
  for (float p : a) d.scale = std::max(d.scale, static_cast<double>(std::fabs(p)));
  for (std::size_t i = 0; i < a.size(); ++i) d.worst = std::max(d.worst, static_cast<double>(std::fabs(a[i] - b[i])));
  return d;
}

/// tests/train/train_mpi_test.cpp derives this bound for a P-rank run against a one-rank run
/// (only the order of additions differs); zero against ddp at the same P differs the same way
/// (reduce-scatter vs all-reduce order, the norm summed over shards), over fewer steps.
constexpr double kRelativeBound = 2e-4;

/// Ranks [0, ranks) of `comm` run `o`; the others wait. Returns the result on those ranks.
inline train::TrainResult run_on(coll::Communicator& comm, int ranks, const train::TrainOptions& o) {
  coll::Communicator part = comm.split(comm.rank() < ranks ? 0 : 1, comm.rank());
  train::TrainResult r;
  if (comm.rank() < ranks) r = train::run_training(o, part);
  comm.barrier();
  return r;
}

}  // namespace hpctrain::testing
