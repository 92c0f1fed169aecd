#include "hpctrain/train/timeline.hpp"

#include <nlohmann/json.hpp>

#include <cstring>
#include <fstream>

#include "hpctrain/base/error.hpp"

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
  // Every rank's events travel as one fixed-size block of 64-bit words (the length first),
  // padded to the longest rank's, so one allgather carries them all.
  const std::string mine = timeline.chrome_events(comm.rank());
  std::int64_t length = static_cast<std::int64_t>(mine.size());
  std::int64_t longest = length;
  comm.allreduce(&longest, 1, coll::ReduceOp::max);
  const std::size_t words = static_cast<std::size_t>((longest + 7) / 8) + 1;  // +1: the length
  std::vector<std::int64_t> packed(words, 0), all(words * static_cast<std::size_t>(comm.size()));
  packed[0] = length;
  std::memcpy(packed.data() + 1, mine.data(), mine.size());
  comm.allgather(packed.data(), all.data(), words, coll::DataType::i64);
  if (comm.rank() != 0) return;
  std::ofstream out(path);
  HPCTRAIN_REQUIRE(out.good(), "--timeline: cannot write '" + path + "'");
  out << "{\"traceEvents\":[";
  for (int r = 0; r < comm.size(); ++r) {
    const std::int64_t* block = all.data() + static_cast<std::size_t>(r) * words;
    if (r) out << ",";
    out.write(reinterpret_cast<const char*>(block + 1), block[0]);
  }
  out << "],\"displayTimeUnit\":\"ms\"}\n";
}

}  // namespace hpctrain::train
