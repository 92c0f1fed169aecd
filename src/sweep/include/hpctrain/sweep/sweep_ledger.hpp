#pragma once
/// @file
/// The coordinator's book of a sweep (world rank 0): which trials wait, run and have finished,
/// the scheduler's decisions on their epoch results, and the files that record them
/// (results.jsonl, one line per finished trial, appended and flushed as each finishes;
/// reports.jsonl, one line per epoch result with the seconds since the sweep started; and
/// sweep-state.json, the trial list a --resume must match). MPI-free: the message loop that
/// feeds it lives in sweep_coordinator.cpp.

#include <chrono>
#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
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
  Next next(nlohmann::json* assignment);
  /// A running trial's epoch result {"trial", "epochs", "metric", "params", "checkpoint"}:
  /// the decision {"action": "continue"|"stop"|"exploit", and for exploit "donor",
  /// "donor_epochs", "donor_checkpoint", "params"}.
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
  std::string out_dir_;
  std::vector<nlohmann::json> trials_;
  std::unique_ptr<Scheduler> scheduler_;
  int max_concurrent_;
  std::int64_t next_ = 0;
  int running_ = 0;
  bool stopping_ = false;
  std::int64_t interrupted_ = 0;
  std::map<std::int64_t, nlohmann::json> records_;
  std::map<std::int64_t, std::map<std::int64_t, std::string>> checkpoints_;  ///< trial -> epochs -> step dir
  std::ofstream results_, reports_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

/// Best record by `metric` ("test_accuracy" | "test_loss") under `mode` among completed and
/// stopped trials with a finite metric; nullopt when there is none.
std::optional<nlohmann::json> best_record(const std::map<std::int64_t, nlohmann::json>& records,
                                          const std::string& metric, Mode mode);

}  // namespace hpctrain::sweep
