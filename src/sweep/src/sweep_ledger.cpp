#include "hpctrain/sweep/sweep_ledger.hpp"

#include <chrono>
#include <cmath>
#include <filesystem>

#include "hpctrain/base/error.hpp"
#include "hpctrain/io/durable_file.hpp"
#include "jsonl_file.hpp"

namespace hpctrain::sweep {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

/// A trial's "continue" before any PBT exploit: its first run, with its drawn parameters.
json first_run(const json& params) {
  return {{"segment", 0}, {"params", params}, {"lineage", json::array()}, {"donor_checkpoint", ""}};
}

}  // namespace

SweepLedger::SweepLedger(std::string out_dir, std::vector<json> trials, json identity,
                         std::unique_ptr<Scheduler> scheduler, int max_concurrent, bool resume)
    : out_dir_(std::move(out_dir)), trials_(std::move(trials)), scheduler_(std::move(scheduler)),
      max_concurrent_(max_concurrent), resume_(resume) {
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
  results_ = open_jsonl_for_append(results.string(), "--out");
  reports_ = open_jsonl_for_append((fs::path(out_dir_) / "reports.jsonl").string(), "--out");
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
  // A record cut short by a kill is skipped: that trial runs again.
  for (const auto& [line, record] : read_jsonl((fs::path(out_dir_) / "results.jsonl").string())) {
    if (record.contains("trial") && record["trial"].is_number_integer()) records_[record["trial"].get<std::int64_t>()] = record;
  }
  replay_journal((fs::path(out_dir_) / "reports.jsonl").string());
  for (const auto& [trial, record] : records_) scheduler_->on_finished(trial);
}

void SweepLedger::replay_journal(const std::string& path) {
  double last_seconds = 0.0;
  for (const auto& [line, r] : read_jsonl(path)) {
    const std::string where = "--resume: '" + path + "' line " + std::to_string(line);
    HPCTRAIN_REQUIRE(r.contains("trial") && r["trial"].is_number_integer() && r.contains("epochs") &&
                         r["epochs"].is_number_integer() && r.contains("metric"),
                     where + ": not an epoch report (needs trial, epochs, metric)");
    const auto trial = r["trial"].get<std::int64_t>();
    HPCTRAIN_REQUIRE(trial >= 0 && trial < trial_count(), where + ": trial " + std::to_string(trial) +
                                                              " is not in the sweep's trial list");
    const auto epochs = r["epochs"].get<std::int64_t>();
    const auto segment = r.value("segment", std::int64_t{0});
    last_seconds = std::max(last_seconds, r.value("seconds", 0.0));
    if (decided_.count({trial, segment, epochs}) != 0) continue;  // a result reported twice was decided once
    // Journals written before the decisions were journaled lack params: the trial's own.
    const json params = r.contains("params") ? r["params"] : trials_[static_cast<std::size_t>(trial)];
    const json result = {{"trial", trial}, {"segment", segment}, {"epochs", epochs}, {"metric", r["metric"]}, {"params", params},
                         {"checkpoint", r.value("checkpoint", std::string())}, {"final", r.value("final", false)}};
    const double metric = r["metric"].is_number() ? r["metric"].get<double>() : NAN;
    const json decision = decide(result, scheduler_->replay(trial, epochs, metric, params));
    HPCTRAIN_REQUIRE(!r.contains("decision") || r["decision"] == decision,
                     where + ": trial " + std::to_string(trial) + " after " + std::to_string(epochs) +
                         " epochs was decided " + (r.contains("decision") ? r["decision"].dump() : "") +
                         ", but the scheduler replaying the journal decides " + decision.dump() +
                         " (was the sweep started with other --asha-*/--pbt-* flags or another hpctrain?)");
  }
  // reports.jsonl's seconds go on from the interrupted sweep's (the pause is not counted).
  start_ -= std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(last_seconds));
}

SweepLedger::Next SweepLedger::next(json* assignment) {
  while (next_ < trial_count() && records_.count(next_) != 0) ++next_;
  if (stopping_ || next_ >= trial_count()) return Next::done;
  if (max_concurrent_ > 0 && running_ >= max_concurrent_) return Next::wait;
  *assignment = json{{"trial", next_}, {"params", trials_[static_cast<std::size_t>(next_)]}};
  if (resume_) {
    const auto run = runs_.find(next_);
    (*assignment)["continue"] = run != runs_.end() ? run->second : first_run((*assignment)["params"]);
  }
  ++next_;
  ++running_;
  return Next::assign;
}

json SweepLedger::report(const json& result) {
  const auto trial = result.at("trial").get<std::int64_t>();
  const auto epochs = result.at("epochs").get<std::int64_t>();
  // A trial continued after --resume may report an epoch the journal has decided already.
  const std::tuple<std::int64_t, std::int64_t, std::int64_t> key{trial, result.value("segment", std::int64_t{0}), epochs};
  if (const auto done = decided_.find(key); done != decided_.end()) return done->second;
  const double metric = result.at("metric").is_number() ? result.at("metric").get<double>() : NAN;
  const json decision = decide(result, scheduler_->on_result(trial, epochs, metric, result.at("params")));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  reports_ << json{{"trial", trial},
                   {"segment", std::get<1>(key)},
                   {"epochs", epochs},
                   {"metric", result.at("metric")},
                   {"seconds", seconds},
                   {"params", result.at("params")},
                   {"checkpoint", result.value("checkpoint", std::string())},
                   {"final", result.value("final", false)},
                   {"decision", decision}}
                  .dump()
           << "\n";
  reports_.flush();
  HPCTRAIN_REQUIRE(reports_.good(), "--out: writing '" + out_dir_ + "/reports.jsonl' failed (disk full, quota or I/O error)");
  return decision;
}

json SweepLedger::decide(const json& result, const Decision& d) {
  const auto trial = result.at("trial").get<std::int64_t>();
  const auto epochs = result.at("epochs").get<std::int64_t>();
  checkpoints_[trial][epochs] = result.value("checkpoint", std::string());
  json decision = {{"action", "continue"}, {"basis", d.basis}};
  if (d.action == Decision::Action::stop) decision["action"] = "stop";
  if (d.action == Decision::Action::exploit) {
    const auto& donor = checkpoints_[d.donor];
    const auto at = donor.find(d.donor_epochs);
    if (at != donor.end() && !at->second.empty()) {
      decision["action"] = "exploit";
      decision["donor"] = d.donor;
      decision["donor_epochs"] = d.donor_epochs;
      decision["donor_checkpoint"] = at->second;
      decision["params"] = d.params;
    }
  }
  decided_[{trial, result.value("segment", std::int64_t{0}), epochs}] = decision;
  // The run the trial is in: an exploit before the run's last epoch starts the next one.
  json& run = runs_[trial];
  if (run.is_null()) run = first_run(trials_[static_cast<std::size_t>(trial)]);
  if (decision["action"] == "exploit" && !result.value("final", false)) {
    run["segment"] = run["segment"].get<int>() + 1;
    run["params"] = decision["params"];
    run["lineage"].push_back({{"donor", decision["donor"]}, {"epochs", decision["donor_epochs"]}});
    run["donor_checkpoint"] = decision["donor_checkpoint"];
  }
  return decision;
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
