#include "hpctrain/sweep/sweep_ledger.hpp"

#include <chrono>
#include <cmath>
#include <filesystem>

#include "hpctrain/base/error.hpp"
#include "hpctrain/io/durable_file.hpp"

namespace hpctrain::sweep {

namespace fs = std::filesystem;
using nlohmann::json;

SweepLedger::SweepLedger(std::string out_dir, std::vector<json> trials, json identity,
                         std::unique_ptr<Scheduler> scheduler, int max_concurrent, bool resume)
    : out_dir_(std::move(out_dir)), trials_(std::move(trials)), scheduler_(std::move(scheduler)),
      max_concurrent_(max_concurrent) {
  const fs::path results = fs::path(out_dir_) / "results.jsonl";
  const fs::path state = fs::path(out_dir_) / "sweep-state.json";
  identity["trials"] = trials_;
  if (resume) {
    load_previous(identity);
  } else {
    HPCTRAIN_REQUIRE(!fs::exists(results) && !fs::exists(state),
                     "--out '" + out_dir_ + "' already holds a sweep (results.jsonl or sweep-state.json): pass "
                     "--resume to continue it, or choose another --out");
  }
  io::atomic_write_file(state.string(), identity.dump(2) + "\n");
  results_.open(results, std::ios::app);
  HPCTRAIN_REQUIRE(results_.good(), "--out: cannot write '" + results.string() + "'");
  const fs::path reports = fs::path(out_dir_) / "reports.jsonl";
  reports_.open(reports, std::ios::app);
  HPCTRAIN_REQUIRE(reports_.good(), "--out: cannot write '" + reports.string() + "'");
}

void SweepLedger::load_previous(const json& identity) {
  const fs::path state = fs::path(out_dir_) / "sweep-state.json";
  std::ifstream in(state);
  HPCTRAIN_REQUIRE(in.good(), "--resume: '" + state.string() + "' cannot be read (no sweep to resume in --out)");
  json previous;
  try {
    previous = json::parse(in);
  } catch (const std::exception& e) {
    HPCTRAIN_FAIL("--resume: '" + state.string() + "' is not valid JSON: " + e.what());
  }
  for (const auto& [key, value] : identity.items()) {
    HPCTRAIN_REQUIRE(previous.contains(key) && previous[key] == value,
                     "--resume: the sweep in '" + out_dir_ + "' was started with another " + key +
                         " (the space, seed, scheduler and trial budget must be the same to resume)");
  }
  std::ifstream lines(fs::path(out_dir_) / "results.jsonl");
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    try {
      const json record = json::parse(line);
      records_[record.at("trial").get<std::int64_t>()] = record;
    } catch (const std::exception&) {
      // A line cut short by a kill: that trial runs again.
    }
  }
}

SweepLedger::Next SweepLedger::next(json* assignment) {
  while (next_ < trial_count() && records_.count(next_) != 0) ++next_;
  if (stopping_ || next_ >= trial_count()) return Next::done;
  if (max_concurrent_ > 0 && running_ >= max_concurrent_) return Next::wait;
  *assignment = json{{"trial", next_}, {"params", trials_[static_cast<std::size_t>(next_)]}};
  ++next_;
  ++running_;
  return Next::assign;
}

json SweepLedger::report(const json& result) {
  const auto trial = result.at("trial").get<std::int64_t>();
  const auto epochs = result.at("epochs").get<std::int64_t>();
  checkpoints_[trial][epochs] = result.value("checkpoint", std::string());
  const double metric = result.at("metric").is_number() ? result.at("metric").get<double>() : NAN;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  reports_ << json{{"trial", trial}, {"epochs", epochs}, {"metric", result.at("metric")}, {"seconds", seconds}}.dump()
           << "\n";
  reports_.flush();
  const Decision d = scheduler_->on_result(trial, epochs, metric, result.at("params"));
  switch (d.action) {
    case Decision::Action::proceed:
      return json{{"action", "continue"}};
    case Decision::Action::stop:
      return json{{"action", "stop"}};
    case Decision::Action::exploit:
      break;
  }
  const auto& donor = checkpoints_[d.donor];
  const auto at = donor.find(d.donor_epochs);
  if (at == donor.end() || at->second.empty()) return json{{"action", "continue"}};
  return json{{"action", "exploit"},
              {"donor", d.donor},
              {"donor_epochs", d.donor_epochs},
              {"donor_checkpoint", at->second},
              {"params", d.params}};
}

void SweepLedger::finished(const json& record) {
  const auto trial = record.at("trial").get<std::int64_t>();
  --running_;
  scheduler_->on_finished(trial);
  if (record.at("status") == kInterrupted) {
    ++interrupted_;
    return;
  }
  records_[trial] = record;
  results_ << record.dump() << "\n";
  results_.flush();
  HPCTRAIN_REQUIRE(results_.good(), "--out: writing '" + out_dir_ + "/results.jsonl' failed (disk full, quota or I/O error)");
}

std::optional<json> best_record(const std::map<std::int64_t, json>& records, const std::string& metric, Mode mode) {
  std::optional<json> best;
  for (const auto& [trial, r] : records) {
    if (r.at("status") == kFailed || !r.contains(metric) || !r.at(metric).is_number()) continue;
    const double v = score(r.at(metric).get<double>(), mode);
    if (!std::isfinite(v)) continue;
    if (!best || v > score(best->at(metric).get<double>(), mode)) best = r;
  }
  return best;
}

}  // namespace hpctrain::sweep
