#pragma once
// (internal) The point-to-point messages between the trial groups' leaders and the sweep
// coordinator on world rank 0: JSON documents over two private duplicates of the world
// communicator, one for requests (leaders -> coordinator) and one for replies (coordinator ->
// leaders), so the coordinator thread and rank 0's own leader never take each other's
// messages. The only file of the sweep that speaks MPI.
//
//   leader -> coordinator   kRequest  {"group"}                       reply kAssign: {"trial", "params"[, "continue"]} | {"done": true}
//   leader -> coordinator   kReport   {"trial", "segment", "epochs", "final", "metric", "params", "checkpoint"}
//                                                                     reply kDecision (SweepLedger::report)
//   leader -> coordinator   kFinished the trial's record              no reply

#include <mpi.h>

#include <nlohmann/json.hpp>

#include "hpctrain/base/mpi_handle.hpp"

namespace hpctrain::sweep {

enum MessageTag : int { kRequest = 1, kReport = 2, kFinished = 3, kAssign = 4, kDecision = 5 };

class TrialChannel {
 public:
  /// Collective over `world` (MPI_Comm_dup twice).
  explicit TrialChannel(MPI_Comm world);

  /// Leader side: a request or report to the coordinator; `reply_tag` >= 0 waits for its reply.
  nlohmann::json ask(MessageTag tag, const nlohmann::json& message, int reply_tag);
  /// Coordinator side: the next request from any leader if one has arrived (non-blocking).
  bool poll(nlohmann::json* message, int* source, int* tag);
  /// Coordinator side: a reply to `dest`.
  void reply(int dest, MessageTag tag, const nlohmann::json& message);

 private:
  MpiCommHandle requests_, replies_;
};

}  // namespace hpctrain::sweep
