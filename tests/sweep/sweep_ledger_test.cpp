// SweepLedger's journal (reports.jsonl) replayed on --resume (sweep/sweep_ledger.hpp): a sweep
// interrupted half-way and resumed decides as the uninterrupted one, with the donors'
// checkpoints and the trials' PBT runs restored. MPI-free: the ledger is fed by hand.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "hpctrain/base/error.hpp"
#include "process_temp_dir.hpp"
#include "hpctrain/sweep/asha_scheduler.hpp"
#include "hpctrain/sweep/pbt_scheduler.hpp"
#include "hpctrain/sweep/sweep_ledger.hpp"

namespace hpctrain::sweep {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int kTrials = 6;

SearchSpace lr_space() {
  return parse_search_space(json::parse(R"({"search": {"lr": {"loguniform": [0.01, 0.1]}}})"), "pbt.json",
                            [](const std::string&) { return std::string(); });
}

std::vector<json> trial_params() {
  std::vector<json> params;
  for (int t = 0; t < kTrials; ++t) params.push_back({{"lr", 0.01 + 0.01 * t}});
  return params;
}

std::unique_ptr<Scheduler> make(const std::string& kind, double rf = 2.0) {
  if (kind == "asha") return std::make_unique<AshaScheduler>(AshaOptions{1, rf, 4, Mode::max});
  return std::make_unique<PbtScheduler>(PbtOptions{1, 0.5, {0.8, 1.2}, Mode::max, 3}, lr_space());
}

// An empty directory `name` under the test process's temporary directory (removed at exit).
fs::path fresh_dir(const std::string& name) {
  const fs::path dir = hpctrain::testing::process_temp_dir("hpctrain_ledger_test_") / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

SweepLedger open_ledger(const fs::path& dir, const std::string& kind, bool resume, double rf = 2.0) {
  return SweepLedger(dir.string(), trial_params(), json{{"scheduler", kind}}, make(kind, rf), 0, resume);
}

/// The reports of a sweep of kTrials x 4 epochs, interleaved; each trial's params and run
/// follow its exploits (as trial_runner.cpp does).
struct Driver {
  std::map<std::int64_t, json> params;
  std::map<std::int64_t, int> segment;
  std::size_t position = 0;
  std::vector<json> decisions;
  std::vector<json> reports;

  json next_report() {
    const auto epoch = static_cast<std::int64_t>(position / kTrials) + 1;
    const auto trial = static_cast<std::int64_t>((position % kTrials) * 5 + epoch) % kTrials;
    ++position;
    if (params.count(trial) == 0) params[trial] = {{"lr", 0.01 + 0.01 * static_cast<double>(trial)}};
    const double metric = 0.3 + 0.1 * static_cast<double>(epoch) + 0.07 * static_cast<double>((trial * 7 + epoch * 3) % 5);
    return {{"trial", trial},   {"segment", segment[trial]}, {"epochs", epoch}, {"final", epoch == 4},
            {"metric", metric}, {"params", params[trial]},
            {"checkpoint", "trials/" + std::to_string(trial) + "/step-" + std::to_string(epoch)}};
  }
  void run(SweepLedger& ledger, std::size_t until) {
    while (position < until) {
      const json report = next_report();
      const json d = ledger.report(report);
      const auto trial = report["trial"].get<std::int64_t>();
      if (d["action"] == "exploit" && !report["final"].get<bool>()) {
        params[trial] = d["params"];
        ++segment[trial];
      }
      decisions.push_back(d);
      reports.push_back(report);
    }
  }
};

constexpr std::size_t kReports = kTrials * 4;
constexpr std::size_t kCut = kTrials + 3;  // interrupted half-way through epoch 2's reports

std::vector<json> uninterrupted(const std::string& kind) {
  const fs::path dir = fresh_dir(kind + "_whole");
  SweepLedger ledger = open_ledger(dir, kind, false);
  Driver driver;
  driver.run(ledger, kReports);
  return driver.decisions;
}

/// The sweep up to kCut, "killed" (a report cut short at the journal's end), resumed, the rest.
Driver interrupted(const std::string& kind, const fs::path& dir) {
  Driver driver;
  {
    SweepLedger ledger = open_ledger(dir, kind, false);
    driver.run(ledger, kCut);
  }
  std::ofstream(dir / "reports.jsonl", std::ios::app) << R"({"trial": 1, "epochs": 3, "met)";
  SweepLedger ledger = open_ledger(dir, kind, true);
  driver.run(ledger, kReports);
  return driver;
}

TEST(LedgerReplay, AshaResumedDecidesAsUninterrupted) {
  const auto expected = uninterrupted("asha");
  const fs::path dir = fresh_dir("asha_resumed");
  const Driver resumed = interrupted("asha", dir);
  EXPECT_EQ(resumed.decisions, expected);
  // The journal is whole again (the cut record stays one unreadable line) and the first
  // decision after the resume at a rung counts the rung's entries from before it.
  std::ifstream in(dir / "reports.jsonl");
  std::vector<json> journal;
  std::string line;
  int unreadable = 0;
  while (std::getline(in, line)) {
    const json r = json::parse(line, nullptr, false);
    if (r.is_discarded()) {
      ++unreadable;
    } else {
      journal.push_back(r);
    }
  }
  EXPECT_EQ(unreadable, 1);
  ASSERT_EQ(journal.size(), kReports);
  std::map<std::int64_t, std::int64_t> before;  // rung -> entries journaled before the resume
  for (std::size_t i = 0; i < kCut; ++i) {
    const json& basis = journal[i]["decision"]["basis"];
    if (basis.contains("rung")) ++before[basis["rung"].get<std::int64_t>()];
  }
  std::size_t i = kCut;
  while (i < kReports && !journal[i]["decision"]["basis"].contains("rung")) ++i;  // epoch 3 is no rung
  ASSERT_LT(i, kReports);
  const json& first_after = journal[i]["decision"]["basis"];
  EXPECT_EQ(first_after["rung_size"], before[first_after["rung"].get<std::int64_t>()]);
  EXPECT_GT(first_after["rung_size"].get<std::int64_t>(), 0);
  fs::remove_all(dir);
}

TEST(LedgerReplay, PbtResumedDecidesAsUninterruptedAndTrialsKeepTheirRuns) {
  const auto expected = uninterrupted("pbt");
  int exploits = 0;
  for (std::size_t i = 0; i < kReports / 2; ++i) exploits += expected[i]["action"] == "exploit";
  ASSERT_GT(exploits, 0) << "the first half must hold an exploit for this test to mean anything";
  const fs::path dir = fresh_dir("pbt_resumed");
  const Driver first_half = [&] {
    Driver d;
    SweepLedger ledger = open_ledger(dir, "pbt", false);
    d.run(ledger, kReports / 2);
    return d;
  }();
  SweepLedger ledger = open_ledger(dir, "pbt", true);
  // No trial has a record: each is handed out with the run it was in (its exploits so far).
  for (int t = 0; t < kTrials; ++t) {
    json assignment;
    ASSERT_EQ(ledger.next(&assignment), SweepLedger::Next::assign);
    const auto trial = assignment["trial"].get<std::int64_t>();
    const json& run = assignment["continue"];
    EXPECT_EQ(run["segment"], first_half.segment.count(trial) ? first_half.segment.at(trial) : 0) << trial;
    EXPECT_EQ(run["params"], first_half.params.at(trial)) << trial;
    EXPECT_EQ(run["lineage"].size(), run["segment"].get<std::size_t>()) << trial;
  }
  // A result reported again (a continued run re-reporting an epoch) gets its journaled decision.
  EXPECT_EQ(ledger.report(first_half.reports.back()), first_half.decisions.back());
  // Continue the sweep and compare every decision.
  Driver rest = first_half;
  rest.run(ledger, kReports);
  EXPECT_EQ(rest.decisions, expected);
  fs::remove_all(dir);
}

TEST(LedgerReplay, RefusesAJournalAnotherSchedulerWrote) {
  const fs::path dir = fresh_dir("asha_other_rf");
  {
    SweepLedger ledger = open_ledger(dir, "asha", false);
    Driver driver;
    driver.run(ledger, kReports / 2);
  }
  try {
    open_ledger(dir, "asha", true, 4.0);
    FAIL() << "a journal decided with rf 2 replayed under rf 4 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("reports.jsonl' line"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--asha-*/--pbt-*"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace hpctrain::sweep
