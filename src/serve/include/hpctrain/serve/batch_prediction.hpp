#pragma once
/// @file
/// run_batch_prediction: the whole of `hpctrain predict`.

#include <mpi.h>

#include <cstdint>
#include <string>

#include "hpctrain/collectives/communicator.hpp"

namespace hpctrain::serve {

struct PredictOptions {
  std::string checkpoint;    ///< a checkpoint directory (its newest valid step) or one step-<N>
  std::string data;          ///< hpctrain HDF5 data set (docs/data.md)
  std::string out;           ///< predictions file (prediction_file.hpp)
  std::int64_t batch = 256;  ///< samples per forward pass (the evaluation's batch)
};

struct PredictSummary {
  std::int64_t samples = 0;
  std::int64_t step = 0;          ///< the checkpoint's step
  std::string step_dir;
  double seconds = 0.0;           ///< forward passes and writes, max over ranks
  double samples_per_s = 0.0;
  double accuracy = 0.0;          ///< against the data set's labels
};

/// Collective over `comm` (and `mpi_comm`, the same ranks, for the parallel HDF5 file).
///
/// Rank 0 resolves and verifies the checkpoint and checks the options; every rank learns the
/// verdict, so a bad flag or a damaged checkpoint stops every rank with one message. Each rank
/// reads the model itself (any writer rank count). The data set's N samples are cut into
/// batches of `batch` in file order (the last may be shorter); rank r takes the contiguous run
/// of batches [r B / P, (r + 1) B / P) of the B batches, normalises them as the trainer did,
/// runs the forward pass (train = false) and writes its rows collectively.
///
/// Determinism: a batch's rows, its size and its position do not depend on P, so the bytes of
/// /predictions and /probabilities depend on P only through the compute threads per rank; with
/// the same threads per rank (e.g. HPCTRAIN_THREADS_PER_RANK=1) they are identical at any P.
PredictSummary run_batch_prediction(coll::Communicator& comm, MPI_Comm mpi_comm, const PredictOptions& options);

}  // namespace hpctrain::serve
