#pragma once
// (internal) What a finished sweep leaves in --out besides results.jsonl (rank 0):
// summary.json, best/ (a copy of the best trial's newest checkpoint step) and metric.png (every
// trial's metric against epochs, drawn by matplotlib through Python; a warning, not an error,
// when that is not available).

#include <string>

#include "hpctrain/sweep/sweep_ledger.hpp"
#include "hpctrain/sweep/sweep_options.hpp"

namespace hpctrain::sweep {

/// Writes summary.json and best/; returns the summary.
nlohmann::json write_summary(const SweepOptions& options, const SweepLedger& ledger, double wall_seconds);

/// Draws metric.png from the trials' metrics files (trials/<n>/metrics*.jsonl eval records).
/// Python: $HPCTRAIN_PYTHON, else /usr/bin/python3, else python3 on PATH.
void plot_metric(const SweepOptions& options);

}  // namespace hpctrain::sweep
