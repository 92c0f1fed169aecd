#include "hpctrain/train/timeline.hpp"

#include <nlohmann/json.hpp>

#include <fstream>
#include <string>
#include <vector>

#include "hpctrain/base/error.hpp"
#include "hpctrain/collectives/string_collectives.hpp"

namespace hpctrain::train {

std::string Timeline::chrome_events(int rank) const {
  std::string out;
  auto us = [&](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double, std::micro>(t - origin_).count();
  };
  nlohmann::json meta = {{"name", "process_name"}, {"ph", "M"}, {"pid", rank}, {"tid", 0},
                         {"args", {{"name", "rank " + std::to_string(rank)}}}};
  out += meta.dump();
  for (int tid = 0; tid < 2; ++tid) {
    nlohmann::json thread = {{"name", "thread_name"}, {"ph", "M"}, {"pid", rank}, {"tid", tid},
                             {"args", {{"name", tid == 0 ? "training" : "communication"}}}};
    out += "," + thread.dump();
  }
  for (const Span& s : spans_) {
    nlohmann::json e = {{"name", s.name}, {"cat", s.category}, {"ph", "X"}, {"pid", rank},
                        {"tid", s.thread}, {"ts", us(s.begin)}, {"dur", us(s.end) - us(s.begin)}};
    out += "," + e.dump();
  }
  return out;
}

void write_chrome_trace(const Timeline& timeline, coll::Communicator& comm, const std::string& path) {
  const std::vector<std::string> events = coll::allgather_strings(comm, timeline.chrome_events(comm.rank()));
  if (comm.rank() != 0) return;
  std::ofstream out(path);
  HPCTRAIN_REQUIRE(out.good(), "--timeline: cannot write '" + path + "'");
  out << "{\"traceEvents\":[";
  for (std::size_t r = 0; r < events.size(); ++r) out << (r ? "," : "") << events[r];
  out << "],\"displayTimeUnit\":\"ms\"}\n";
}

}  // namespace hpctrain::train
