#pragma once
// (internal) The coordinator: a thread on world rank 0 that answers the groups' leaders from
// the SweepLedger until every group has been told "done". It polls (non-blocking probe, then a
// short sleep) so it also notices a preemption signal while every group is busy training.

#include <thread>

#include "hpctrain/sweep/sweep_ledger.hpp"
#include "trial_messages.hpp"

namespace hpctrain::sweep {

class SweepCoordinator {
 public:
  /// Starts the thread. `groups`: how many leaders will ask (each until told "done").
  SweepCoordinator(SweepLedger& ledger, TrialChannel& channel, int groups, bool quiet);
  /// Joins the thread (the loop ends once every group has been told "done").
  ~SweepCoordinator();
  SweepCoordinator(const SweepCoordinator&) = delete;
  SweepCoordinator& operator=(const SweepCoordinator&) = delete;
  /// Waits for the loop to end; rethrows an error it met (e.g. results.jsonl unwritable).
  void join();

 private:
  void loop() noexcept;
  void handle(const nlohmann::json& message, int source, int tag);
  void serve_waiting();
  SweepLedger& ledger_;
  TrialChannel& channel_;
  int groups_left_;
  bool quiet_;
  std::vector<int> waiting_;  ///< leaders whose request waits for a free slot
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace hpctrain::sweep
