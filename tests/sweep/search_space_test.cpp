// SPACE.json parsing and the trials drawn from it (sweep/search_space.hpp).
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "hpctrain/base/error.hpp"
#include "hpctrain/sweep/search_space.hpp"

namespace hpctrain::sweep {
namespace {

using nlohmann::json;

const char* kIssueSpace = R"({"base": {"model": "mlp", "epochs": 2},
  "search": {"lr": {"loguniform": [0.001, 0.2]}, "momentum": {"choice": [0.8, 0.9]},
             "global-batch": {"choice": [64, 128]}},
  "search_algorithm": "random", "seed": 1})";

std::string accept_all(const std::string&) { return ""; }

std::string error_of(const std::string& text, OptionCheck check = accept_all) {
  try {
    parse_search_space(json::parse(text), "space.json", check);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(SearchSpace, ParsesTheIssueShape) {
  const SearchSpace s = parse_search_space(json::parse(kIssueSpace), "space.json", accept_all);
  EXPECT_EQ(s.base, json::parse(R"({"model": "mlp", "epochs": 2})"));
  ASSERT_EQ(s.search.size(), 3u);
  EXPECT_EQ(s.search[0].first, "global-batch");  // nlohmann orders keys
  EXPECT_EQ(s.algorithm, SearchAlgorithm::random);
  EXPECT_TRUE(s.has_seed);
  EXPECT_EQ(s.seed, 1u);
}

TEST(SearchSpace, UnderscoreAndDashKeysAreOneOption) {
  const SearchSpace s = parse_search_space(
      json::parse(R"({"base": {"global_batch": 64}, "search": {"weight_decay": {"uniform": [0, 0.1]}}})"), "s.json",
      accept_all);
  EXPECT_TRUE(s.base.contains("global-batch"));
  EXPECT_EQ(s.search[0].first, "weight-decay");
  EXPECT_NE(error_of(R"({"base": {"global_batch": 64}, "search": {"global-batch": {"choice": [1]}}})")
                .find("in both base and search"),
            std::string::npos);
}

TEST(SearchSpace, BadFilesNameTheFileAndTheKey) {
  EXPECT_NE(error_of(R"({"search": {"lr": {"gaussian": [0, 1]}}})").find("space.json': search.lr: unknown distribution 'gaussian'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"search": {"momentum": {"choice": []}}})").find("search.momentum.choice: the list of values is empty"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"search": {"lr": {"uniform": [0.2, 0.1]}}})").find("search.lr.uniform: lo > hi (0.2 > 0.1)"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"search": {"lr": {"loguniform": [0, 0.1]}}})").find("lo must be positive"), std::string::npos);
  EXPECT_NE(error_of(R"({"search": {"epochs": {"randint": [1.5, 3]}}})").find("bounds must be integers"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"search": {}, "search_algorithm": "bayes"})").find("unknown 'bayes'"), std::string::npos);
  EXPECT_NE(error_of(R"({"base": {}, "searches": {}})").find("unknown key 'searches'"), std::string::npos);
  const OptionCheck only_lr = [](const std::string& name) {
    return name == "lr" ? std::string() : "unknown train option '" + name + "'";
  };
  EXPECT_NE(error_of(R"({"base": {"frobnicate": 1}, "search": {}})", only_lr)
                .find("space.json': base.frobnicate: unknown train option 'frobnicate'"),
            std::string::npos);
}

TEST(SearchSpace, RandomTrialsAreAFunctionOfTheSeedAndStayInRange) {
  const SearchSpace s = parse_search_space(json::parse(kIssueSpace), "space.json", accept_all);
  const auto a = generate_trial_params(s, 200, 1);
  EXPECT_EQ(a, generate_trial_params(s, 200, 1));
  EXPECT_NE(a, generate_trial_params(s, 200, 2));
  std::set<double> momenta;
  double log_sum = 0;
  for (const auto& t : a) {
    const double lr = t["lr"].get<double>();
    EXPECT_GE(lr, 0.001);
    EXPECT_LE(lr, 0.2);
    log_sum += std::log(lr);
    momenta.insert(t["momentum"].get<double>());
    EXPECT_TRUE(t["global-batch"] == 64 || t["global-batch"] == 128);
  }
  EXPECT_EQ(momenta, (std::set<double>{0.8, 0.9}));
  // Log-uniform: the mean of log(lr) is near the middle of [log 0.001, log 0.2] (200 draws:
  // standard error 0.11 of a range of 5.3).
  EXPECT_NEAR(log_sum / 200, 0.5 * (std::log(0.001) + std::log(0.2)), 0.4);
}

TEST(SearchSpace, GridEnumeratesEveryCombinationFirstKeySlowest) {
  const SearchSpace s = parse_search_space(
      json::parse(R"({"search": {"a": {"grid": [1, 2, 3]}, "b": {"choice": ["x", "y"]}, "c": {"randint": [5, 7]}},
                      "search_algorithm": "grid"})"),
      "g.json", accept_all);
  const auto t = generate_trial_params(s, 0, 9);
  ASSERT_EQ(t.size(), 6u);
  for (std::size_t i = 0; i < t.size(); ++i) {
    EXPECT_EQ(t[i]["a"], static_cast<int>(i / 2) + 1);
    EXPECT_EQ(t[i]["b"], i % 2 == 0 ? "x" : "y");
    EXPECT_TRUE(t[i]["c"] == 5 || t[i]["c"] == 6);  // randint: lo..hi-1
  }
  EXPECT_EQ(generate_trial_params(s, 4, 9).size(), 4u);
}

TEST(SearchSpace, RandomSearchCyclesThroughGridKeys) {
  const SearchSpace s = parse_search_space(
      json::parse(R"({"search": {"a": {"grid": [1, 2]}, "lr": {"uniform": [0.1, 0.2]}}})"), "r.json", accept_all);
  const auto t = generate_trial_params(s, 5, 3);
  ASSERT_EQ(t.size(), 5u);
  for (std::size_t i = 0; i < t.size(); ++i) EXPECT_EQ(t[i]["a"], static_cast<int>(i % 2) + 1);
}

}  // namespace
}  // namespace hpctrain::sweep
