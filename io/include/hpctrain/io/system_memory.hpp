#pragma once
/// @file
/// How much memory this process can still take, and refusing work that would not fit before
/// allocating it (so a too-large model or benchmark size gets a clear error instead of the
/// kernel's OOM killer).

#include <cstdint>
#include <string>

namespace hpctrain::io {

/// Memory this process can still allocate, as far as the kernel says.
struct AvailableMemory {
  /// The smaller of the node's MemAvailable (/proc/meminfo) and, when this process's cgroup has
  /// a limit (v2 `memory.max`, or v1 `memory.limit_in_bytes`), that limit less the cgroup's
  /// current use. 0 when neither can be read (then `source` says so).
  std::uint64_t bytes = 0;
  /// Where `bytes` comes from, for messages: "MemAvailable in /proc/meminfo" or
  /// "cgroup limit 8.0 GiB less 1.2 GiB in use (/sys/fs/cgroup/job/memory.max)".
  std::string source;
  bool known() const noexcept { return !source.empty() && bytes > 0; }
};

/// Reads /proc/meminfo and this process's cgroup (from /proc/self/cgroup). The environment
/// variable HPCTRAIN_MEMORY_AVAILABLE_BYTES, when set, replaces the answer (tests; a scheduler
/// that knows better).
AvailableMemory available_memory();

/// `bytes` for people: "512 B", "3.0 KiB", "31.9 GiB", "2.1 TiB".
std::string format_bytes(double bytes);

/// Parses the value of /proc/meminfo's "MemAvailable:" line (kB) from the file's text; 0 when
/// absent. Exposed for tests.
std::uint64_t parse_mem_available(const std::string& meminfo);

/// The value of `key` in a cgroup memory.stat text ("key value" lines), or 0 when it is absent.
/// Exposed for tests.
std::uint64_t stat_value(const std::string& memory_stat, const std::string& key);

}  // namespace hpctrain::io
