#pragma once
/// @file
/// How rank 0 hands whole batches to the other ranks of `hpctrain serve` and gets the results
/// back: plain MPI point-to-point on a communicator of the server's own (a duplicate of the
/// world), one message exchange per batch.
///
/// Protocol (rank 0 -> rank r, then r -> 0), all on `comm`:
///   header   int64[2] {kind, n}           tag kHeader
///   batch    (kind 1) float[n x input]    tag kPayload  -> reply float[n x classes] (kResult),
///                                                         int32[n] and int64 step (kResult)
///   reload   (kind 2) char[n] JSON source tag kPayload  -> reply int64[2] {ok, step} and, when
///                                                         not ok, char[] message (kResult)
///   stop     (kind 3)                                    -> the rank's loop returns
/// Rank 0 talks to rank r from one thread only (RemoteRank), so the messages of different
/// batches never interleave; the ranks themselves run serve_worker_loop.

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hpctrain/serve/checkpoint_source.hpp"
#include "hpctrain/serve/inference_model.hpp"

namespace hpctrain::serve {

/// Where a batch runs: this process's model, or another rank's.
class BatchRunner {
 public:
  virtual ~BatchRunner() = default;
  /// Forward pass of `rows` raw instances; fills probabilities and predictions (sized by the
  /// caller) and returns the checkpoint step of the model that ran it.
  virtual std::int64_t run(const float* instances, std::int64_t rows, float* probabilities,
                           std::int32_t* predictions) = 0;
  /// Replaces the model with `source`'s; on failure keeps the old one and throws.
  virtual void reload(const CheckpointSource& source) = 0;
  /// Ends the rank's service (remote ranks: their loop returns). Idempotent.
  virtual void stop() = 0;
};

/// Rank 0's own model.
std::unique_ptr<BatchRunner> make_local_runner(std::unique_ptr<InferenceModel> model);

/// Rank `rank` > 0 of `comm`, through the protocol above.
std::unique_ptr<BatchRunner> make_remote_runner(MPI_Comm comm, int rank, std::int64_t input_size, std::int64_t classes);

/// Ranks > 0: answers rank 0's messages with `model` until told to stop.
void serve_worker_loop(MPI_Comm comm, std::unique_ptr<InferenceModel> model);

/// The JSON text of a CheckpointSource and back (for the reload message and broadcasts).
std::string to_json_text(const CheckpointSource& source);
CheckpointSource source_from_json_text(const std::string& text);

}  // namespace hpctrain::serve
