#pragma once
/// @file
/// run_http_service: the whole of `hpctrain serve` (docs/serving.md).
///
/// Endpoints (rank 0, cpp-httplib):
///   POST /v1/predict  {"instances": [[u...], ...]} -> {"predictions", "probabilities", "model_step"};
///                     400 {"error"} for malformed JSON, a wrong instance length, a non-finite
///                     value or more than --max-instances; 413 {"error"} for a body over
///                     --max-body-bytes; 500 {"error"} if a forward pass failed
///   GET /healthz      200 "ok" (the server listens only once every rank has its model)
///   GET /metrics      Prometheus text (serve_metrics.hpp)
///   GET /v1/model     the model config, checkpoint step and checksum, input size, classes,
///                     normalisation, ranks and batching knobs

#include <mpi.h>

#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/serve/serve_options.hpp"

namespace hpctrain::serve {

/// Collective over `comm` and `world` (the same ranks). Rank 0 checks the options and the
/// checkpoint (every rank learns the verdict); every rank loads the model; ranks > 0 then
/// answer rank 0's batches (rank_workers.hpp) while rank 0 serves HTTP on options.host:port
/// and prints "hpctrain: serving ... on http://HOST:PORT". SIGTERM (or SIGUSR1) on rank 0:
/// stop accepting, answer the requests already received, stop the other ranks, return 0.
/// Throws hpctrain::Error for bad options or a port that cannot be bound.
int run_http_service(coll::Communicator& comm, MPI_Comm world, const ServeOptions& options);

}  // namespace hpctrain::serve
