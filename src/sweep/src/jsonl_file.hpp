#pragma once
// (internal) The sweep's append-only JSON-lines files (results.jsonl, reports.jsonl): read back
// skipping a record cut short by a kill, and reopened for appending so that the next record
// starts on a line of its own.

#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace hpctrain::sweep {

/// The records of `path` with their line numbers (from 1), in file order; lines that are not a
/// JSON object (cut short by a kill) are skipped. A missing file has none.
std::vector<std::pair<std::size_t, nlohmann::json>> read_jsonl(const std::string& path);

/// Opens `path` for appending; when its last line was cut short (no final newline) a newline
/// ends it first, so the cut record stays one unreadable line. Throws naming `flag` and `path`.
std::ofstream open_jsonl_for_append(const std::string& path, const std::string& flag);

}  // namespace hpctrain::sweep
