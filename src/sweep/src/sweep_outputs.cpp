#include "sweep_outputs.hpp"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "hpctrain/base/error.hpp"
#include "hpctrain/io/checkpoint.hpp"
#include "hpctrain/io/durable_file.hpp"

namespace hpctrain::sweep {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

/// The checkpoint directory of a trial's last run (checkpoints, or checkpoints-<k> after PBT
/// exploits: the highest k).
fs::path last_checkpoint_dir(const fs::path& trial_dir) {
  fs::path best = trial_dir / "checkpoints";
  long best_index = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(trial_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("checkpoints-", 0) != 0) continue;
    const long index = std::strtol(name.c_str() + 12, nullptr, 10);
    if (index > best_index) {
      best_index = index;
      best = entry.path();
    }
  }
  return best;
}

/// best/: the best trial's newest valid checkpoint step and a `latest` naming it.
void copy_best_checkpoint(const SweepOptions& o, std::int64_t trial) {
  const fs::path best = fs::path(o.out_dir) / "best";
  fs::remove_all(best);
  const fs::path from = last_checkpoint_dir(fs::path(o.out_dir) / "trials" / std::to_string(trial));
  const std::string step = io::find_latest_checkpoint(from.string(), nullptr);
  HPCTRAIN_REQUIRE(!step.empty(), "sweep: the best trial " + std::to_string(trial) + " left no valid checkpoint in '" +
                                      from.string() + "'");
  fs::create_directories(best);
  const std::string name = fs::path(step).filename().string();
  fs::copy(step, best / name, fs::copy_options::recursive);
  io::atomic_write_file((best / "latest").string(), name + "\n");
}

constexpr const char* kPlotProgram = R"PY(
import glob, json, os, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
out, metric = sys.argv[1], sys.argv[2]
field = "accuracy" if metric == "test_accuracy" else "loss"
fig, ax = plt.subplots(figsize=(7, 4.5))
trials = sorted((d for d in glob.glob(os.path.join(out, "trials", "*")) if os.path.basename(d).isdigit()),
                key=lambda d: int(os.path.basename(d)))
for d in trials:
    points = []
    for f in sorted(glob.glob(os.path.join(d, "metrics*.jsonl"))):
        for line in open(f):
            r = json.loads(line)
            if r.get("type") == "eval":
                points.append((r["epoch"] + 1, r[field]))
    points.sort()
    if points:
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label="trial " + os.path.basename(d))
ax.set_xlabel("epochs")
ax.set_ylabel(metric)
ax.set_title("hpctrain sweep: " + metric + " per trial")
if len(trials) <= 16:
    ax.legend(fontsize="small")
ax.grid(alpha=0.3)
fig.tight_layout()
fig.savefig(os.path.join(out, "metric.png"), dpi=100)
)PY";

std::string python() {
  if (const char* p = std::getenv("HPCTRAIN_PYTHON"); p != nullptr && *p != '\0') return p;
  if (fs::exists("/usr/bin/python3")) return "/usr/bin/python3";
  return "python3";
}

std::string quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

}  // namespace

json write_summary(const SweepOptions& o, const SweepLedger& ledger, double wall_seconds) {
  const auto& records = ledger.records();
  json summary = {{"metric", o.metric},         {"mode", o.mode == Mode::max ? "max" : "min"},
                  {"scheduler", to_string(o.scheduler)}, {"wall_seconds", wall_seconds},
                  {"trials", static_cast<std::int64_t>(records.size())}};
  std::map<std::string, std::int64_t> statuses;
  for (const auto& [t, r] : records) ++statuses[r.at("status").get<std::string>()];
  summary["statuses"] = statuses;
  const auto best = best_record(records, o.metric, o.mode);
  summary["best_trial"] = best ? best->at("trial") : json(nullptr);
  summary["best_params"] = best ? best->at("params") : json(nullptr);
  summary["best_test_accuracy"] = best ? best->at("test_accuracy") : json(nullptr);
  summary["best_test_loss"] = best ? best->at("test_loss") : json(nullptr);
  if (best) copy_best_checkpoint(o, best->at("trial").get<std::int64_t>());
  io::atomic_write_file((fs::path(o.out_dir) / "summary.json").string(), summary.dump(2) + "\n");
  return summary;
}

void plot_metric(const SweepOptions& o) {
  const fs::path script = fs::path(o.out_dir) / ".plot_metric.py";
  {
    std::ofstream out(script);
    out << kPlotProgram;
  }
  const std::string command = quoted(python()) + " " + quoted(script.string()) + " " + quoted(o.out_dir) + " " +
                              quoted(o.metric) + " 2>&1";
  const int rc = std::system(command.c_str());
  fs::remove(script);
  if (rc != 0) {
    std::fprintf(stderr, "hpctrain: warning: sweep: metric.png not drawn (%s with matplotlib failed; Debian: "
                         "apt-get install python3-matplotlib)\n", python().c_str());
  }
}

}  // namespace hpctrain::sweep
