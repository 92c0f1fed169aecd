#include "hpctrain/io/system_memory.hpp"

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include <fmt/format.h>

namespace hpctrain::io {

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) return "";
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

/// A file holding one number ("max" or absurd values mean no limit): the number, else nullopt.
std::optional<std::uint64_t> read_limit(const std::string& path) {
  std::string text = read_text(path);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  if (text.empty() || text == "max") return std::nullopt;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (end == text.c_str() || *end != '\0') return std::nullopt;
  // cgroup v1 reports "no limit" as the largest page-aligned signed value (~9.2e18).
  if (v >= (std::uint64_t{1} << 60)) return std::nullopt;
  return static_cast<std::uint64_t>(v);
}

}  // namespace

std::uint64_t stat_value(const std::string& memory_stat, const std::string& key) {
  std::istringstream lines(memory_stat);
  for (std::string line; std::getline(lines, line);) {
    if (line.size() > key.size() && line.compare(0, key.size(), key) == 0 && line[key.size()] == ' ') {
      return std::strtoull(line.c_str() + key.size() + 1, nullptr, 10);
    }
  }
  return 0;
}

namespace {

/// This process's cgroup limit less its use, with a description; nullopt when it has none.
std::optional<AvailableMemory> cgroup_headroom() {
  std::istringstream lines(read_text("/proc/self/cgroup"));
  for (std::string line; std::getline(lines, line);) {
    // "0::/path" (v2) or "4:memory:/path" (v1).
    const auto first = line.find(':'), second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string path = line.substr(second + 1);
    const bool v2 = line.compare(0, first, "0") == 0 && controllers.empty();
    if (!v2 && controllers.find("memory") == std::string::npos) continue;
    const std::string mount = v2 ? "/sys/fs/cgroup" : "/sys/fs/cgroup/memory";
    const char* limit_name = v2 ? "memory.max" : "memory.limit_in_bytes";
    const char* usage_name = v2 ? "memory.current" : "memory.usage_in_bytes";
    // Inside a container the cgroup's own directory is often mounted as the root.
    for (const std::string& dir : {mount + path, mount}) {
      const std::optional<std::uint64_t> limit = read_limit(dir + "/" + limit_name);
      if (!limit) continue;
      // In use = the working set: the charge less the inactive file cache, which the kernel
      // reclaims before it OOM-kills (what cAdvisor and the kubelet count). The charge alone
      // includes the page cache of everything read in the group, so a run streaming a data set
      // larger than the limit found the group "full" and was refused (bench-out-of-core.sh).
      const std::uint64_t charged = read_limit(dir + "/" + usage_name).value_or(0);
      const std::uint64_t inactive_file =
          stat_value(read_text(dir + "/memory.stat"), v2 ? "inactive_file" : "total_inactive_file");
      const std::uint64_t used = charged > inactive_file ? charged - inactive_file : 0;
      AvailableMemory a;
      a.bytes = *limit > used ? *limit - used : 0;
      a.source = fmt::format("cgroup limit {} less {} in use ({}/{}; in use = {} less its inactive file cache)",
                             format_bytes(static_cast<double>(*limit)), format_bytes(static_cast<double>(used)), dir,
                             limit_name, usage_name);
      return a;
    }
  }
  return std::nullopt;
}

}  // namespace

std::uint64_t parse_mem_available(const std::string& meminfo) {
  std::istringstream lines(meminfo);
  for (std::string line; std::getline(lines, line);) {
    unsigned long long kb = 0;
    if (std::sscanf(line.c_str(), "MemAvailable: %llu kB", &kb) == 1) return static_cast<std::uint64_t>(kb) * 1024;
  }
  return 0;
}

std::string format_bytes(double bytes) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 6) {
    bytes /= 1024.0;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} B", bytes) : fmt::format("{:.1f} {}", bytes, units[u]);
}

AvailableMemory available_memory() {
  if (const char* v = std::getenv("HPCTRAIN_MEMORY_AVAILABLE_BYTES"); v != nullptr && *v != '\0') {
    char* end = nullptr;
    const unsigned long long n = std::strtoull(v, &end, 10);
    if (end != v && *end == '\0') return {static_cast<std::uint64_t>(n), "HPCTRAIN_MEMORY_AVAILABLE_BYTES"};
  }
  AvailableMemory a;
  a.bytes = parse_mem_available(read_text("/proc/meminfo"));
  if (a.bytes > 0) a.source = "MemAvailable in /proc/meminfo";
  if (const auto cgroup = cgroup_headroom(); cgroup && (!a.known() || cgroup->bytes < a.bytes)) a = *cgroup;
  return a;
}

}  // namespace hpctrain::io
