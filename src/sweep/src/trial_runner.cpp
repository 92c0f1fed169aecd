#include "trial_runner.hpp"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <optional>
#include <string>

#include "hpctrain/base/error.hpp"
#include "hpctrain/collectives/agreement.hpp"
#include "hpctrain/io/checkpoint.hpp"
#include "hpctrain/io/dataset.hpp"
#include "hpctrain/io/durable_file.hpp"
#include "hpctrain/io/epoch_plan.hpp"
#include "hpctrain/io/tfevents_writer.hpp"
#include "hpctrain/sweep/sweep_ledger.hpp"

namespace hpctrain::sweep {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

/// One run of the trainer within a trial: the first, or one after a PBT exploit.
struct Segment {
  int index = 0;
  json params;
  std::string dir(const fs::path& trial_dir, const char* what) const {
    return (trial_dir / (index == 0 ? std::string(what) : std::string(what) + "-" + std::to_string(index))).string();
  }
};

/// What a segment's epoch hook learnt from the coordinator.
struct EpochOutcome {
  bool stopped = false;
  std::optional<json> exploit;  ///< the coordinator's exploit decision
};

double metric_of(const train::EvalResult& eval, const std::string& metric) {
  if (eval.samples == 0) return NAN;
  return metric == "test_loss" ? eval.loss : eval.accuracy;
}

/// The epoch hook: rank 0 of the group reports to the coordinator and every rank of the
/// group gets its decision (continue, stop, exploit).
std::function<bool(std::int64_t, const train::EvalResult&)> epoch_hook(const TrialContext& c, std::int64_t trial,
                                                                       const Segment& segment,
                                                                       const std::string& checkpoint_dir,
                                                                       std::int64_t epochs, EpochOutcome& outcome) {
  return [&c, trial, &segment, checkpoint_dir, epochs, &outcome](std::int64_t epoch, const train::EvalResult& eval) {
    std::string decision;
    if (c.group.rank() == 0) {
      const double metric = metric_of(eval, c.sweep.metric);
      json report = {{"trial", trial},
                     {"segment", segment.index},
                     {"epochs", epoch + 1},
                     {"final", epoch + 1 >= epochs},
                     {"metric", std::isfinite(metric) ? json(metric) : json(nullptr)},
                     {"params", segment.params},
                     {"checkpoint", io::find_latest_checkpoint(checkpoint_dir, nullptr)}};
      decision = c.channel.ask(kReport, report, kDecision).dump();
    }
    const json d = json::parse(coll::broadcast_string(c.group, decision));
    const std::string action = d.at("action").get<std::string>();
    // After the last epoch a stop or an exploit changes nothing: the trial has completed.
    if (action == "stop" && epoch + 1 < epochs) outcome.stopped = true;
    if (action == "exploit" && epoch + 1 < epochs) outcome.exploit = d;
    return action == "continue" || (action == "exploit" && !outcome.exploit);
  };
}

/// Rank 0 of the group: copies the donor's step directory into the next segment's checkpoint
/// directory and points its `latest` at it, so the next run resumes from the copy.
void copy_donor_checkpoint(const std::string& donor_step_dir, const std::string& into) {
  fs::create_directories(into);
  const fs::path step = fs::path(donor_step_dir).lexically_normal();
  const std::string name = step.filename().string();
  fs::copy(step, fs::path(into) / name, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  io::atomic_write_file((fs::path(into) / "latest").string(), name + "\n");
}

/// `continuing`: the segment goes on from its own checkpoint after `hpctrain sweep --resume`
/// (appending to its metrics file) instead of starting as a new run.
train::TrainOptions segment_options(const TrialContext& c, const fs::path& trial_dir, const Segment& segment,
                                    bool continuing) {
  json merged = c.base;
  for (const auto& [key, value] : segment.params.items()) merged[key] = value;
  train::TrainOptions o = c.factory(merged, c.group);
  HPCTRAIN_REQUIRE(!o.eval_data.empty(), "a sweep needs evaluation data: its metric is the test split's "
                                         "(give eval-data in base, or leave data at its default)");
  o.quiet = true;
  o.metrics_path = segment.dir(trial_dir, "metrics") + ".jsonl";
  o.checkpoint_dir = segment.dir(trial_dir, "checkpoints");
  o.checkpoint_every = steps_per_epoch(o);
  o.checkpoint_every_s = 0;
  o.keep = static_cast<int>(o.epochs + 1);  // PBT copies any epoch's checkpoint
  const bool fresh = segment.index == 0 && !continuing;
  o.resume = fresh ? "none" : "auto";
  o.overwrite_checkpoints = fresh;
  o.evaluate_resumed = segment.index > 0 && !continuing;  // the copied checkpoint's metric opens the run's records
  o.append_metrics = continuing;
  if (c.sweep.tensorboard) o.tensorboard_dir = (trial_dir / "tensorboard").string();
  return o;
}

/// Collective over the group, after `hpctrain sweep --resume`: whether the trial's run
/// `segment` goes on from a checkpoint of its own. Rank 0 looks; when the run was a PBT child
/// whose donor copy the interruption cut short, it copies the donor's checkpoint again.
bool continue_run(const TrialContext& c, const fs::path& trial_dir, const Segment& segment, const json& run) {
  int answer = 0;
  // A failed donor copy on rank 0 reaches every rank of the group (printed once), not a wait.
  coll::rank0_decides(c.group, [&] {
    const std::string dir = segment.dir(trial_dir, "checkpoints");
    const std::string donor = run.value("donor_checkpoint", std::string());
    if (segment.index > 0 && io::find_latest_checkpoint(dir, nullptr).empty() && !donor.empty() && fs::exists(donor)) {
      copy_donor_checkpoint(donor, dir);
    }
    std::error_code ec;
    const bool has_metrics = fs::file_size(segment.dir(trial_dir, "metrics") + ".jsonl", ec) > 0 && !ec;
    answer = !io::find_latest_checkpoint(dir, nullptr).empty() && has_metrics ? 1 : 0;
  });
  c.group.broadcast(&answer, 1, coll::DataType::i32, 0);
  return answer == 1;
}

}  // namespace

std::int64_t steps_per_epoch(const train::TrainOptions& o) {
  const io::DatasetReader reader(o.data);
  const io::EpochPlan plan(reader.info().count, o.global_batch, 0, 1, o.seed, o.drop_last, true,
                           o.deterministic ? o.micro_shard : 1);
  return std::max<std::int64_t>(1, (plan.batches_per_epoch() + o.accumulate - 1) / o.accumulate);
}

json run_trial(const TrialContext& c, const json& assignment) {
  const auto trial = assignment.at("trial").get<std::int64_t>();
  const fs::path trial_dir = fs::path(c.sweep.out_dir) / "trials" / std::to_string(trial);
  const auto start = std::chrono::steady_clock::now();
  const json run = assignment.value("continue", json());  // --resume: the run the trial was in
  Segment segment{run.is_object() ? run.at("segment").get<int>() : 0, run.is_object() ? run.at("params") : assignment.at("params")};
  json record = {{"trial", trial}};
  json lineage = run.is_object() ? run.at("lineage") : json::array();  // PBT: {"donor", "epochs"} of every exploit
  train::TrainResult result;
  std::optional<io::TfEventsWriter> hparams;  // --tensorboard: the trial as an HParams session
  try {
    if (c.group.rank() == 0) fs::create_directories(trial_dir);
    if (c.group.rank() == 0 && c.sweep.tensorboard) {
      hparams.emplace((trial_dir / "tensorboard").string(), "--tensorboard");
      hparams->add_hparams_session_start(segment.params, std::to_string(trial));
    }
    c.group.barrier();
    bool continuing = run.is_object() && continue_run(c, trial_dir, segment, run);
    if (continuing) record["continued"] = true;
    for (;;) {
      EpochOutcome outcome;
      train::TrainOptions o = segment_options(c, trial_dir, segment, continuing);
      continuing = false;
      o.after_epoch = epoch_hook(c, trial, segment, o.checkpoint_dir, o.epochs, outcome);
      result = train::run_training(o, c.group);
      if (result.preempted || !outcome.exploit) {
        record["status"] = result.preempted ? kInterrupted : (outcome.stopped ? kStopped : kCompleted);
        break;
      }
      const json& d = *outcome.exploit;
      lineage.push_back({{"donor", d.at("donor")}, {"epochs", d.at("donor_epochs")}});
      Segment next{segment.index + 1, d.at("params")};
      if (c.group.rank() == 0) copy_donor_checkpoint(d.at("donor_checkpoint"), next.dir(trial_dir, "checkpoints"));
      c.group.barrier();
      segment = next;
    }
  } catch (const std::exception& e) {
    record["status"] = kFailed;
    record["error"] = e.what();
  }
  record["params"] = segment.params;
  const bool evaluated = result.eval.samples > 0 && record["status"] != kFailed;
  record["test_accuracy"] = evaluated ? json(result.eval.accuracy) : json(nullptr);
  record["test_loss"] = evaluated && std::isfinite(result.eval.loss) ? json(result.eval.loss) : json(nullptr);
  record["epochs_run"] = result.epochs_completed;
  record["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (hparams && record["status"] != kInterrupted) hparams->add_hparams_session_end(record["status"] != kFailed);
  if (!lineage.empty()) {
    record["parent"] = lineage.back().at("donor");  // whose checkpoint the trial's last run started from
    record["lineage"] = lineage;
  }
  return record;
}

}  // namespace hpctrain::sweep
