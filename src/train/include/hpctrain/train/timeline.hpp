#pragma once
/// @file
/// Per-rank spans (compute, all-reduce, data wait) written as Chrome-trace JSON
/// (chrome://tracing, Perfetto): one process per rank, so overlap is visible.

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "hpctrain/collectives/communicator.hpp"

namespace hpctrain::train {

struct Span {
  std::string name;
  std::string category;  ///< "compute", "allreduce", "data", "optimizer"
  int thread = 0;        ///< 0 = training thread, 1 = communication thread
  std::chrono::steady_clock::time_point begin, end;
};

class Timeline {
 public:
  explicit Timeline(bool enabled = false) : enabled_(enabled), origin_(std::chrono::steady_clock::now()) {}
  bool enabled() const noexcept { return enabled_; }
  void add(Span s) {
    if (enabled_) spans_.push_back(std::move(s));
  }
  const std::vector<Span>& spans() const noexcept { return spans_; }
  std::chrono::steady_clock::time_point origin() const noexcept { return origin_; }
  /// This rank's spans as Chrome-trace events (JSON array elements, no brackets).
  std::string chrome_events(int rank) const;

 private:
  bool enabled_;
  std::chrono::steady_clock::time_point origin_;
  std::vector<Span> spans_;
};

/// Collective: gathers every rank's spans to rank 0, which writes one Chrome-trace JSON file
/// at `path` (one process per rank). Throws on rank 0 when the file cannot be written.
void write_chrome_trace(const Timeline& timeline, coll::Communicator& comm, const std::string& path);

}  // namespace hpctrain::train
