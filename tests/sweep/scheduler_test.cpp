// ASHA and PBT as state machines fed by hand (sweep/asha_scheduler.hpp, pbt_scheduler.hpp).
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "hpctrain/base/error.hpp"
#include "hpctrain/sweep/asha_scheduler.hpp"
#include "hpctrain/sweep/pbt_scheduler.hpp"

namespace hpctrain::sweep {
namespace {

using nlohmann::json;
using Action = Decision::Action;

TEST(Percentile, MatchesNumpyLinearInterpolation) {
  // numpy.percentile([1, 2, 3, 4], q) for q = 50, 25, 0, 100: 2.5, 1.75, 1, 4.
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 25), 1.75);
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 0), 1);
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 100), 4);
  EXPECT_DOUBLE_EQ(percentile({7}, 50), 7);
}

TEST(Asha, RungsAtGraceTimesFactorPowers) {
  EXPECT_EQ(AshaScheduler({1, 2.0, 8, Mode::max}).rungs(), (std::vector<std::int64_t>{1, 2, 4, 8}));
  EXPECT_EQ(AshaScheduler({2, 3.0, 20, Mode::max}).rungs(), (std::vector<std::int64_t>{2, 6, 18}));
  EXPECT_THROW(AshaScheduler({0, 2.0, 4, Mode::max}), Error);
  EXPECT_THROW(AshaScheduler({1, 1.0, 4, Mode::max}), Error);
}

TEST(Asha, StopsBelowTheRungQuantileInArrivalOrder) {
  AshaScheduler asha({1, 2.0, 4, Mode::max});
  const json p = json::object();
  EXPECT_EQ(asha.on_result(0, 1, 0.50, p).action, Action::proceed);  // first at the rung
  EXPECT_EQ(asha.on_result(1, 1, 0.40, p).action, Action::stop);     // below median {0.5}
  EXPECT_EQ(asha.on_result(2, 1, 0.46, p).action, Action::proceed);  // above median {0.5, 0.4} = 0.45
  EXPECT_EQ(asha.on_result(3, 1, 0.44, p).action, Action::stop);     // below median {0.5, 0.4, 0.46} = 0.46
  // Epoch 2 is the next rung: trial 0 is the first there; epoch 3 is no rung (already recorded at 2).
  EXPECT_EQ(asha.on_result(0, 2, 0.60, p).action, Action::proceed);
  EXPECT_EQ(asha.on_result(2, 2, 0.55, p).action, Action::stop);
  EXPECT_EQ(asha.on_result(0, 3, 0.10, p).action, Action::proceed);
  EXPECT_EQ(asha.on_result(9, 1, NAN, p).action, Action::stop);
}

TEST(Asha, MinModeStopsTheLarger) {
  AshaScheduler asha({1, 2.0, 2, Mode::min});
  const json p = json::object();
  EXPECT_EQ(asha.on_result(0, 1, 0.5, p).action, Action::proceed);
  EXPECT_EQ(asha.on_result(1, 1, 0.7, p).action, Action::stop);
  EXPECT_EQ(asha.on_result(2, 1, 0.3, p).action, Action::proceed);
}

SearchSpace lr_space() {
  return parse_search_space(
      json::parse(R"({"search": {"lr": {"loguniform": [0.01, 0.1]}, "momentum": {"choice": [0.8, 0.9]}}})"),
      "pbt.json", [](const std::string&) { return std::string(); });
}

TEST(Pbt, BottomQuantileExploitsATopTrialWithPerturbedParameters) {
  PbtScheduler pbt({1, 0.25, {0.8, 1.2}, Mode::max, 5}, lr_space());
  const json p0 = {{"lr", 0.05}, {"momentum", 0.9}};
  EXPECT_EQ(pbt.on_result(0, 1, 0.9, p0).action, Action::proceed);  // alone: no bottom
  EXPECT_EQ(pbt.on_result(2, 1, 0.95, p0).action, Action::proceed);  // the best of two
  EXPECT_EQ(pbt.on_result(3, 1, 0.92, p0).action, Action::proceed);  // 3 trials, n = 1: bottom is trial 0
  const Decision d = pbt.on_result(1, 1, 0.5, {{"lr", 0.02}, {"momentum", 0.8}});  // 4 trials, n = 1
  ASSERT_EQ(d.action, Action::exploit);
  EXPECT_EQ(d.donor, 2);  // the top 1
  EXPECT_EQ(d.donor_epochs, 1);
  const double lr = d.params["lr"].get<double>();
  EXPECT_TRUE(std::abs(lr - 0.05 * 0.8) < 1e-12 || std::abs(lr - 0.05 * 1.2) < 1e-12) << lr;
  EXPECT_EQ(d.params["momentum"], 0.9);  // a choice is copied from the donor
}

TEST(Pbt, OnlyAtTheIntervalAndClampedToTheRange) {
  PbtScheduler pbt({2, 0.5, {0.1, 10.0}, Mode::max, 1}, lr_space());
  const json top = {{"lr", 0.1}, {"momentum", 0.9}};
  EXPECT_EQ(pbt.on_result(0, 1, 0.9, top).action, Action::proceed);
  EXPECT_EQ(pbt.on_result(1, 1, 0.1, top).action, Action::proceed);  // epoch 1: not a PBT epoch
  const Decision d = pbt.on_result(1, 2, 0.1, top);
  ASSERT_EQ(d.action, Action::exploit);
  EXPECT_EQ(d.donor, 0);
  const double lr = d.params["lr"].get<double>();
  EXPECT_TRUE(lr == 0.01 || lr == 0.1) << lr;  // 0.1 x 0.1 or x 10, clamped to [0.01, 0.1]
  EXPECT_THROW(PbtScheduler({1, 0.6, {0.8, 1.2}, Mode::max, 1}, lr_space()), Error);
}

// Replay (Scheduler::replay, what --resume does with reports.jsonl): a fresh scheduler fed the
// first half of a report sequence through replay() decides the second half exactly as one
// scheduler fed the whole sequence did.
struct Report {
  std::int64_t trial, epochs;
  double metric;
};

/// 6 trials x 4 epochs, interleaved as asynchronous groups report; metrics from a fixed formula.
std::vector<Report> report_sequence() {
  std::vector<Report> reports;
  for (std::int64_t epoch = 1; epoch <= 4; ++epoch) {
    for (std::int64_t k = 0; k < 6; ++k) {
      const std::int64_t trial = (k * 5 + epoch) % 6;
      reports.push_back({trial, epoch, 0.3 + 0.1 * epoch + 0.07 * static_cast<double>((trial * 7 + epoch * 3) % 5)});
    }
  }
  return reports;
}

json as_json(const Decision& d) {
  return {{"action", static_cast<int>(d.action)}, {"donor", d.donor}, {"donor_epochs", d.donor_epochs},
          {"params", d.params}, {"basis", d.basis}};
}

/// Feeds `reports` to `s`: the first `replayed` through replay(), the rest through on_result();
/// each trial's params follow its exploits. Returns every decision.
std::vector<json> feed(Scheduler& s, const std::vector<Report>& reports, std::size_t replayed) {
  std::map<std::int64_t, json> params;
  std::vector<json> decisions;
  for (std::size_t i = 0; i < reports.size(); ++i) {
    const Report& r = reports[i];
    if (params.count(r.trial) == 0) params[r.trial] = {{"lr", 0.01 + 0.01 * static_cast<double>(r.trial)}, {"momentum", 0.9}};
    const Decision d = i < replayed ? s.replay(r.trial, r.epochs, r.metric, params[r.trial])
                                    : s.on_result(r.trial, r.epochs, r.metric, params[r.trial]);
    if (d.action == Action::exploit) params[r.trial] = d.params;
    decisions.push_back(as_json(d));
  }
  return decisions;
}

TEST(Replay, AshaAfterHalfReplayedDecidesAsUninterrupted) {
  const auto reports = report_sequence();
  AshaScheduler whole({1, 2.0, 4, Mode::max});
  const auto expected = feed(whole, reports, 0);
  AshaScheduler resumed({1, 2.0, 4, Mode::max});
  const auto got = feed(resumed, reports, reports.size() / 2);
  EXPECT_EQ(got, expected);
  // The sequence is one where the rungs matter: some trial is stopped after the half, and a
  // scheduler that starts empty there (no replay) decides otherwise.
  bool stop_after_half = false;
  for (std::size_t i = reports.size() / 2; i < reports.size(); ++i) stop_after_half |= expected[i]["action"] == 1;
  EXPECT_TRUE(stop_after_half);
  AshaScheduler forgetful({1, 2.0, 4, Mode::max});
  const std::vector<Report> second_half(reports.begin() + static_cast<std::ptrdiff_t>(reports.size() / 2), reports.end());
  const auto forgot = feed(forgetful, second_half, 0);
  EXPECT_NE(forgot, std::vector<json>(expected.begin() + static_cast<std::ptrdiff_t>(reports.size() / 2), expected.end()));
}

TEST(Replay, AshaBasisCountsTheRungEntries) {
  AshaScheduler asha({1, 2.0, 4, Mode::max});
  const json p = json::object();
  EXPECT_EQ(asha.on_result(0, 1, 0.5, p).basis, (json{{"rung", 1}, {"rung_size", 0}, {"cutoff", nullptr}}));
  asha.on_result(1, 1, 0.4, p);
  const Decision d = asha.on_result(2, 1, 0.46, p);
  EXPECT_EQ(d.basis["rung_size"], 2);
  EXPECT_DOUBLE_EQ(d.basis["cutoff"].get<double>(), 0.45);
}

TEST(Replay, PbtAfterHalfReplayedDecidesAsUninterrupted) {
  const auto reports = report_sequence();
  const PbtOptions options{1, 0.5, {0.8, 1.2}, Mode::max, 7};
  PbtScheduler whole(options, lr_space());
  const auto expected = feed(whole, reports, 0);
  PbtScheduler resumed(options, lr_space());
  const auto got = feed(resumed, reports, reports.size() / 2);
  EXPECT_EQ(got, expected);
  int exploits_after_half = 0;
  for (std::size_t i = reports.size() / 2; i < reports.size(); ++i) exploits_after_half += expected[i]["action"] == 2;
  EXPECT_GT(exploits_after_half, 0);
}

}  // namespace
}  // namespace hpctrain::sweep
