#include "hpctrain/sweep/sweep.hpp"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "hpctrain/base/error.hpp"
#include "hpctrain/collectives/agreement.hpp"
#include "hpctrain/io/tfevents_writer.hpp"
#include "hpctrain/sweep/asha_scheduler.hpp"
#include "hpctrain/sweep/pbt_scheduler.hpp"
#include "hpctrain/sweep/sweep_ledger.hpp"
#include "hpctrain/train/preemption.hpp"
#include "sweep_coordinator.hpp"
#include "sweep_outputs.hpp"
#include "trial_messages.hpp"
#include "trial_runner.hpp"

namespace hpctrain::sweep {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

void validate(const SweepOptions& o, int world_size) {
  HPCTRAIN_REQUIRE(!o.out_dir.empty(), "--out: no output directory given");
  HPCTRAIN_REQUIRE(o.ranks_per_trial >= 1, "--ranks-per-trial must be at least 1, got " +
                                               std::to_string(o.ranks_per_trial));
  HPCTRAIN_REQUIRE(world_size % o.ranks_per_trial == 0,
                   "--ranks-per-trial " + std::to_string(o.ranks_per_trial) + " does not divide the " +
                       std::to_string(world_size) + " ranks of the job into equal trial groups");
  HPCTRAIN_REQUIRE(o.max_trials >= 0, "--max-trials must not be negative");
  HPCTRAIN_REQUIRE(o.metric == "test_accuracy" || o.metric == "test_loss",
                   "--metric: unknown metric '" + o.metric + "' (expected test_accuracy or test_loss)");
  HPCTRAIN_REQUIRE(o.max_concurrent >= 0, "--max-concurrent must not be negative");
}

/// The longest trial's epochs (ASHA's last rung): base's or the largest the search can draw.
std::int64_t max_epochs(const SearchSpace& space) {
  std::int64_t epochs = space.base.contains("epochs") ? space.base["epochs"].get<std::int64_t>() : 1;
  for (const auto& [name, d] : space.search) {
    if (name != "epochs") continue;
    if (d.kind == DistributionKind::choice || d.kind == DistributionKind::grid) {
      for (const auto& v : d.values) epochs = std::max(epochs, v.get<std::int64_t>());
    } else {
      epochs = std::max(epochs, static_cast<std::int64_t>(d.hi));
    }
  }
  return epochs;
}

std::unique_ptr<Scheduler> make_scheduler(const SweepOptions& o, const SearchSpace& space, std::uint64_t seed) {
  switch (o.scheduler) {
    case SchedulerKind::asha:
      return std::make_unique<AshaScheduler>(
          AshaOptions{o.asha_grace_epochs, o.asha_reduction_factor, max_epochs(space), o.mode});
    case SchedulerKind::pbt:
      return std::make_unique<PbtScheduler>(
          PbtOptions{o.pbt_interval_epochs, o.pbt_quantile, o.pbt_perturb, o.mode, seed}, space);
    case SchedulerKind::none:
      break;
  }
  return std::make_unique<FifoScheduler>();
}

/// What a --resume must match.
json sweep_identity(const SweepOptions& o, const SearchSpace& space, std::uint64_t seed) {
  json base = space.base;
  return json{{"base", base}, {"seed", seed}, {"scheduler", to_string(o.scheduler)}, {"metric", o.metric}};
}

/// Every rank: the group asks for trials until told "done" and runs them.
void work(const TrialContext& context) {
  for (;;) {
    std::string reply;
    if (context.group.rank() == 0) reply = context.channel.ask(kRequest, json::object(), kAssign).dump();
    const json assignment = json::parse(coll::broadcast_string(context.group, reply));
    if (assignment.contains("done")) return;
    const json record = run_trial(context, assignment);
    if (context.group.rank() == 0) context.channel.ask(kFinished, record, -1);
  }
}

/// --tensorboard: the HParams experiment (the search keys, the metrics) above the trials' runs.
void write_hparams_experiment(const SweepOptions& o, const SearchSpace& space) {
  std::vector<std::pair<std::string, json>> hparams;
  for (const auto& [name, d] : space.search) {
    const bool listed = d.kind == DistributionKind::choice || d.kind == DistributionKind::grid;
    hparams.emplace_back(name, listed ? d.values.front() : json(0.0));
  }
  io::TfEventsWriter((fs::path(o.out_dir) / "trials").string(), "--tensorboard")
      .add_hparams_experiment(hparams, {"eval/accuracy", "eval/loss"});
}

void print_start(const SweepOptions& o, const SearchSpace& space, std::size_t trials, int groups) {
  std::printf("sweep: %zu trials from '%s' (%s search, scheduler %s, metric %s %s), %d trial group%s of %d rank%s, "
              "out '%s'\n",
              trials, space.file.c_str(), space.algorithm == SearchAlgorithm::grid ? "grid" : "random",
              to_string(o.scheduler), o.metric.c_str(), o.mode == Mode::max ? "max" : "min", groups,
              groups == 1 ? "" : "s", o.ranks_per_trial, o.ranks_per_trial == 1 ? "" : "s", o.out_dir.c_str());
  std::fflush(stdout);
}

}  // namespace

int run_sweep(const SweepOptions& o, const SearchSpace& space, const TrialOptionsFactory& factory,
              coll::Communicator& world) {
  const auto start = std::chrono::steady_clock::now();
  validate(o, world.size());
  train::install_preemption_handlers();
  HPCTRAIN_REQUIRE(o.max_trials >= 1 || space.algorithm == SearchAlgorithm::grid,
                   "--max-trials must be at least 1 for a random search (0 means the whole grid only with "
                   "\"search_algorithm\": \"grid\")");
  const std::uint64_t seed = o.seed_given ? o.seed : space.seed;
  const std::vector<json> trials = generate_trial_params(space, o.max_trials, seed);
  const int groups = world.size() / o.ranks_per_trial;
  std::optional<SweepLedger> ledger;
  coll::rank0_decides(world, [&] {
    fs::create_directories(o.out_dir);
    ledger.emplace(o.out_dir, trials, sweep_identity(o, space, seed), make_scheduler(o, space, seed),
                   o.max_concurrent, o.resume);
    if (o.tensorboard) write_hparams_experiment(o, space);
    if (!o.quiet) print_start(o, space, trials.size(), groups);
  });
  coll::Communicator group = world.split(world.rank() / o.ranks_per_trial, world.rank());
  TrialChannel channel(MPI_COMM_WORLD);
  {
    std::optional<SweepCoordinator> coordinator;
    if (world.rank() == 0) coordinator.emplace(*ledger, channel, groups, o.quiet);
    work(TrialContext{o, space.base, factory, group, channel});
    if (coordinator) coordinator->join();
  }
  int preempted = train::preemption_requested() ? 1 : 0;
  world.allreduce(&preempted, 1, coll::ReduceOp::max);
  coll::rank0_decides(world, [&] {
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const json summary = write_summary(o, *ledger, wall);
    plot_metric(o);
    if (o.quiet) return;
    std::printf("sweep: done in %.1f s: %lld of %lld trials recorded, best trial %s (%s %s)%s\n", wall,
                static_cast<long long>(ledger->records().size()), static_cast<long long>(ledger->trial_count()),
                summary["best_trial"].dump().c_str(), o.metric.c_str(),
                summary[o.metric == "test_loss" ? "best_test_loss" : "best_test_accuracy"].dump().c_str(),
                preempted ? "; preempted: resume with --resume" : "");
    std::fflush(stdout);
  });
  return preempted ? train::kExitRequeue : 0;
}

}  // namespace hpctrain::sweep
