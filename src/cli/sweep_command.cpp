#include "sweep_command.hpp"

#include <set>
#include <sstream>

#include "hpctrain/base/error.hpp"
#include "hpctrain/sweep/search_space.hpp"
#include "hpctrain/sweep/sweep.hpp"
#include "train_options.hpp"

namespace hpctrain::cli {

namespace {

/// Options the sweep sets for every trial itself (per-trial files, checkpoints, output).
const std::set<std::string>& reserved_options() {
  static const std::set<std::string> names = {"metrics", "checkpoint-dir", "checkpoint-every", "checkpoint-every-s",
                                              "keep", "resume", "overwrite-checkpoints", "tensorboard",
                                              "timeline", "config", "quiet", "no-eval"};
  return names;
}

/// SPACE.json keys must be `hpctrain train` options (checked against its own flag table).
sweep::OptionCheck train_option_check() {
  return [](const std::string& name) -> std::string {
    if (reserved_options().count(name) != 0) return "'" + name + "' is set by the sweep itself for every trial";
    TrainArgs args;
    CLI::App app;
    add_train_options(app, args);
    if (app.get_option_no_throw("--" + name) == nullptr) {
      return "unknown train option '" + name + "' (the keys are `hpctrain train`'s long option names)";
    }
    return "";
  };
}

/// `options` (option names -> values) parsed as `hpctrain train` would, resolved on `comm`.
train::TrainOptions trial_options(const nlohmann::json& options, Communicator& comm) {
  TrainArgs args;
  CLI::App app;
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  add_train_options(app, args);
  std::vector<std::string> argv = json_to_arguments(options);
  std::vector<std::string> reversed(argv.rbegin(), argv.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    HPCTRAIN_FAIL(std::string("trial options ") + options.dump() + ": " + e.what());
  }
  return resolve_train_options(args, comm);
}

std::pair<double, double> parse_perturb(const std::string& text) {
  std::istringstream in(text);
  double a = 0, b = 0;
  char comma = 0;
  HPCTRAIN_REQUIRE((in >> a >> comma >> b) && comma == ',' && in.peek() == EOF,
                   "--pbt-perturb: expected two factors like 0.8,1.2, got '" + text + "'");
  return {a, b};
}

}  // namespace

CLI::App* add_sweep_command(CLI::App& app, SweepArgs& a) {
  auto& o = a.options;
  CLI::App* s = app.add_subcommand(
      "sweep", "Hyperparameter sweep: the ranks split into trial groups of --ranks-per-trial ranks, each training one "
               "trial at a time; ASHA or PBT on rank 0 decides from every epoch's test metric (docs/sweeps.md)");
  s->add_option("--space", o.space_file,
                "SPACE.json: {\"base\": {train options}, \"search\": {option: {choice|uniform|loguniform|randint|grid: "
                "[...]}}, \"search_algorithm\": \"random\"|\"grid\", \"seed\": N}")
      ->required();
  s->add_option("--out", o.out_dir,
                "Output directory: results.jsonl, summary.json, best/ (the best trial's checkpoint), metric.png, "
                "trials/<n>/ (metrics, checkpoints)")
      ->required();
  s->add_option("--ranks-per-trial", o.ranks_per_trial, "Ranks K per trial group (P/K groups; K must divide P)")
      ->capture_default_str();
  s->add_option("--scheduler", a.scheduler, "none (every trial runs all its epochs), asha or pbt")->capture_default_str();
  s->add_option("--max-trials", o.max_trials, "Trials drawn (grid search: at most this many; 0 = the whole grid)")
      ->capture_default_str();
  s->add_option("--metric", o.metric, "Metric the schedulers and best/ use: test_accuracy or test_loss")
      ->capture_default_str();
  s->add_option("--mode", a.mode, "max or min (default: max for test_accuracy, min for test_loss)");
  s->add_option("--max-concurrent", o.max_concurrent, "Trials running at once (0: one per group)")
      ->capture_default_str();
  a.seed = s->add_option("--seed", o.seed, "Seed of the trials' parameter draws and PBT's choices (default: SPACE.json's seed)");
  s->add_option("--asha-reduction-factor", o.asha_reduction_factor,
                "ASHA: rungs at grace x factor^k epochs; 1/factor of the trials at a rung go on")
      ->capture_default_str();
  s->add_option("--asha-grace-epochs", o.asha_grace_epochs, "ASHA: epochs before the first rung")->capture_default_str();
  s->add_option("--pbt-interval-epochs", o.pbt_interval_epochs, "PBT: epochs between exploit decisions")
      ->capture_default_str();
  s->add_option("--pbt-quantile", o.pbt_quantile,
                "PBT: fraction of the population in the bottom (exploits) and top (donors), at most 0.5")
      ->capture_default_str();
  s->add_option("--pbt-perturb", a.perturb, "PBT: the two factors a continuous parameter is multiplied by")
      ->capture_default_str();
  s->add_flag("--resume", o.resume,
              "Continue the sweep in --out (after SIGUSR1/SIGTERM, exit 75): trials recorded in results.jsonl are not "
              "run again, reports.jsonl is replayed into the ASHA/PBT scheduler, interrupted trials go on from their "
              "own last checkpoint");
  s->add_flag("--tensorboard", o.tensorboard, "TensorBoard event files per trial in trials/<n>/tensorboard");
  s->add_flag("--quiet", o.quiet, "Only errors");
  return s;
}

int run_sweep_command(SweepArgs& a, Communicator& world) {
  auto& o = a.options;
  o.scheduler = sweep::parse_scheduler(a.scheduler);
  if (a.mode.empty()) a.mode = o.metric == "test_loss" ? "min" : "max";
  HPCTRAIN_REQUIRE(a.mode == "max" || a.mode == "min", "--mode: expected max or min, got '" + a.mode + "'");
  o.mode = a.mode == "max" ? sweep::Mode::max : sweep::Mode::min;
  o.pbt_perturb = parse_perturb(a.perturb);
  o.seed_given = a.seed != nullptr && a.seed->count() > 0;
  sweep::SearchSpace space = sweep::read_search_space(o.space_file, train_option_check());
  // The base alone must make a valid run; without data every trial uses Fashion-MNIST, imported
  // once here rather than by several groups at the same time.
  const train::TrainOptions base = trial_options(space.base, world);
  if (!space.base.contains("data")) {
    space.base["data"] = base.data;
    space.base["eval-data"] = base.eval_data;
  }
  return sweep::run_sweep(o, space, trial_options, world);
}

}  // namespace hpctrain::cli
