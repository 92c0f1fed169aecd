#pragma once
/// @file
/// The coordinator's book of a sweep (world rank 0): which trials wait, run and have finished,
/// the scheduler's decisions on their epoch results, and the files that record them
/// (results.jsonl, one line per finished trial, appended and flushed as each finishes;
/// reports.jsonl, one line per epoch result with the seconds since the sweep started and the
/// decision taken on it; and sweep-state.json, the trial list a --resume must match).
/// MPI-free: the message loop that feeds it lives in sweep_coordinator.cpp.
///
/// reports.jsonl is the scheduler's journal: on --resume its records (in order; a line cut short
/// by a kill is skipped) are replayed into a fresh scheduler (Scheduler::replay), which must
/// reach the journaled decision on each (else the resume is refused: other scheduler flags).
/// The donors' checkpoints, each trial's PBT exploits and a trial's decided epochs come back
/// with it: an epoch result (trial, run, epochs) already in the journal gets its journaled
/// decision again.

#include <chrono>
#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "hpctrain/sweep/scheduler.hpp"

namespace hpctrain::sweep {

/// Trial statuses as results.jsonl writes them; `interrupted` (preempted) is never written.
inline constexpr const char* kCompleted = "completed";
inline constexpr const char* kStopped = "stopped";
inline constexpr const char* kFailed = "failed";
inline constexpr const char* kInterrupted = "interrupted";

class SweepLedger {
 public:
  /// `trials`: every trial's parameters (index = trial number). With `resume`, the records of
  /// `out_dir`/results.jsonl are kept and those trials not run again; sweep-state.json must
  /// list the same trials. Without it, a `out_dir` that already holds results is refused.
  SweepLedger(std::string out_dir, std::vector<nlohmann::json> trials, nlohmann::json identity,
              std::unique_ptr<Scheduler> scheduler, int max_concurrent, bool resume);

  enum class Next { assign, wait, done };
  /// The next trial to hand out ({"trial", "params"}), or wait (the concurrency limit), or done.
  /// After --resume a trial without a record also gets "continue": {"segment", "params",
  /// "lineage", "donor_checkpoint"}: the run it was in (0, or k after k PBT exploits), that
  /// run's parameters, its exploits so far ([{"donor", "epochs"}]) and the last exploit's donor
  /// checkpoint, so that it goes on from its own checkpoint (trial_runner.cpp).
  Next next(nlohmann::json* assignment);
  /// A running trial's epoch result {"trial", "segment", "epochs", "metric", "params",
  /// "checkpoint", "final"} ("segment": the trial's run, 0 or k after k exploits; "final": the
  /// run's last epoch, where a stop or an exploit changes nothing):
  /// the decision {"action": "continue"|"stop"|"exploit", "basis" (Decision::basis), and for
  /// exploit "donor", "donor_epochs", "donor_checkpoint", "params"}.
  nlohmann::json report(const nlohmann::json& result);
  /// A trial's record (status completed, stopped, failed or interrupted).
  void finished(const nlohmann::json& record);
  /// No more trials are handed out (preemption).
  void stop_handing_out() noexcept { stopping_ = true; }
  bool stopping() const noexcept { return stopping_; }

  /// The records of finished trials (resumed ones included), by trial number.
  const std::map<std::int64_t, nlohmann::json>& records() const noexcept { return records_; }
  std::int64_t trial_count() const noexcept { return static_cast<std::int64_t>(trials_.size()); }
  std::int64_t interrupted() const noexcept { return interrupted_; }

 private:
  void load_previous(const nlohmann::json& identity);
  void replay_journal(const std::string& path);
  /// The decision on `decision` for `result` (the scheduler's, an exploit without a donor
  /// checkpoint turned into continue), noted in the books.
  nlohmann::json decide(const nlohmann::json& result, const Decision& decision);
  std::string out_dir_;
  std::vector<nlohmann::json> trials_;
  std::unique_ptr<Scheduler> scheduler_;
  int max_concurrent_;
  std::int64_t next_ = 0;
  int running_ = 0;
  bool stopping_ = false;
  std::int64_t interrupted_ = 0;
  std::map<std::int64_t, nlohmann::json> records_;
  bool resume_ = false;
  std::map<std::int64_t, std::map<std::int64_t, std::string>> checkpoints_;  ///< trial -> epochs -> step dir
  /// (trial, run, epochs) -> decision; a trial's run k is the one after its k-th PBT exploit.
  std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t>, nlohmann::json> decided_;
  std::map<std::int64_t, nlohmann::json> runs_;  ///< trial -> its "continue" (see next())
  std::ofstream results_, reports_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

/// Best record by `metric` ("test_accuracy" | "test_loss") under `mode` among completed and
/// stopped trials with a finite metric; nullopt when there is none.
std::optional<nlohmann::json> best_record(const std::map<std::int64_t, nlohmann::json>& records,
                                          const std::string& metric, Mode mode);

}  // namespace hpctrain::sweep
