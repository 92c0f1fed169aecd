// The tuning knobs' environment overrides (HPCTRAIN_*) and the parsers they share with the
// tuning file and the CLI: byte counts, transports, lists of algorithms.

#include <cerrno>
#include <cstdlib>
#include <sstream>
#include <string>

#include "hpctrain/base/error.hpp"
#include "hpctrain/collectives/tuning.hpp"
#include "modelled_algorithms.hpp"

namespace hpctrain::coll {

namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

std::size_t env_bytes(const char* name, std::size_t fallback, std::size_t min_value) {
  const char* v = env(name);
  if (!v) return fallback;
  const std::size_t value = parse_byte_count(v, name);
  HPCTRAIN_REQUIRE(value >= min_value, std::string(name) + "='" + v + "' must be at least " +
                                           std::to_string(min_value));
  return value;
}

/// `name` as a non-negative number of seconds, else `fallback`; `hint` ends the error message.
double env_seconds(const char* name, double fallback, const char* hint = "") {
  const char* v = env(name);
  if (!v) return fallback;
  char* end = nullptr;
  errno = 0;
  const double s = std::strtod(v, &end);
  HPCTRAIN_REQUIRE(errno == 0 && end != v && *end == '\0' && s >= 0.0,
                   std::string(name) + "='" + v + "' is not a non-negative number of seconds" + hint);
  return s;
}

}  // namespace

std::size_t parse_byte_count(const std::string& text, const std::string& what) {
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  const std::string suffix = end ? end : "";
  std::size_t scale = 0;
  if (suffix.empty() || suffix == "B") scale = 1;
  else if (suffix == "K" || suffix == "KiB") scale = std::size_t{1} << 10;
  else if (suffix == "M" || suffix == "MiB") scale = std::size_t{1} << 20;
  else if (suffix == "G" || suffix == "GiB") scale = std::size_t{1} << 30;
  HPCTRAIN_REQUIRE(errno == 0 && end != text.c_str() && scale != 0 && !text.empty() && text[0] != '-',
                   what + "='" + text + "' is not a byte count (an integer, optionally with K/M/G)");
  return static_cast<std::size_t>(v) * scale;
}

const char* to_string(TransportKind k) noexcept { return k == TransportKind::ucx ? "ucx" : "mpi"; }

TransportKind parse_transport_kind(const std::string& name, const char* where) {
  if (name == "mpi") return TransportKind::mpi;
  if (name == "ucx") return TransportKind::ucx;
  HPCTRAIN_FAIL(std::string(where) + "='" + name + "' is not a transport (expected mpi or ucx)");
}

std::uint32_t parse_auto_algorithms(const std::string& list, const std::string& where) {
  std::uint32_t bits = 0;
  std::stringstream in(list);
  for (std::string name; std::getline(in, name, ',');) {
    if (name.empty()) continue;
    const Algorithm a = parse_algorithm(name, where);
    HPCTRAIN_REQUIRE(detail::is_modelled(a),
                     where + "='" + list + "': '" + name +
                         "' is not a modelled algorithm (expected ring, tree, recursive_doubling, "
                         "rabenseifner, shm, hierarchical)");
    bits |= detail::bit(a);
  }
  HPCTRAIN_REQUIRE(bits != 0, where + "='" + list + "' names no algorithm");
  return bits;
}

Tuning Tuning::from_environment() {
  Tuning t;
  if (const char* v = env("HPCTRAIN_TUNING_FILE")) t = from_file(v);
  HPCTRAIN_REQUIRE(!env("HPCTRAIN_AUTO_TREE_MAX_BYTES"),
                   "HPCTRAIN_AUTO_TREE_MAX_BYTES is no longer used: `auto` picks by the cost model "
                   "(HPCTRAIN_TUNING_FILE from `hpctrain tune-collectives`); restrict it with "
                   "HPCTRAIN_AUTO_ALGOS or force an algorithm with HPCTRAIN_ALLREDUCE_ALGO");
  if (const char* v = env("HPCTRAIN_AUTO_ALGOS")) t.auto_algorithms = parse_auto_algorithms(v, "HPCTRAIN_AUTO_ALGOS");
  if (const char* v = env("HPCTRAIN_ALLREDUCE_ALGO")) {
    t.allreduce_algorithm = parse_algorithm(v, "HPCTRAIN_ALLREDUCE_ALGO");
  }
  t.timeout_s = env_seconds("HPCTRAIN_COLL_TIMEOUT_S", t.timeout_s, " (0 disables the timeout)");
  // Segments below 4 KiB cost more in per-message latency than they gain in overlap.
  t.ring_segment_bytes = env_bytes("HPCTRAIN_RING_SEGMENT_BYTES", t.ring_segment_bytes, 4096);
  t.ring_window = env_bytes("HPCTRAIN_RING_WINDOW", t.ring_window, 1);
  t.tree_segment_bytes = env_bytes("HPCTRAIN_TREE_SEGMENT_BYTES", t.tree_segment_bytes, 4096);
  t.rabenseifner_segment_bytes =
      env_bytes("HPCTRAIN_RABENSEIFNER_SEGMENT_BYTES", t.rabenseifner_segment_bytes, 4096);
  t.tree_binomial_max_bytes =
      env_bytes("HPCTRAIN_TREE_BINOMIAL_MAX_BYTES", t.tree_binomial_max_bytes, 0);
  t.spin_polls = env_bytes("HPCTRAIN_SPIN_POLLS", t.spin_polls, 0);
  t.ranks_per_node = static_cast<int>(env_bytes("HPCTRAIN_RANKS_PER_NODE", 0, 0));
  // Below 4 KiB per segment the two barriers of a segment cost more than its copies.
  t.shm_segment_bytes = env_bytes("HPCTRAIN_SHM_SEGMENT_BYTES", t.shm_segment_bytes, 4096);
  t.shm_small_max_bytes = env_bytes("HPCTRAIN_SHM_SMALL_MAX_BYTES", t.shm_small_max_bytes, 0);
  t.device_chunk_bytes = env_bytes("HPCTRAIN_DEVICE_CHUNK_BYTES", t.device_chunk_bytes, 256);
  if (const char* v = env("HPCTRAIN_TRANSPORT")) t.transport = parse_transport_kind(v, "HPCTRAIN_TRANSPORT");
  t.ucx_reg_min_bytes = env_bytes("HPCTRAIN_UCX_REG_MIN_BYTES", t.ucx_reg_min_bytes, 0);
  t.ucx_reg_max_entries = env_bytes("HPCTRAIN_UCX_REG_MAX_ENTRIES", t.ucx_reg_max_entries, 0);
  t.ucx_peer_errors = env_bytes("HPCTRAIN_UCX_PEER_ERRORS", t.ucx_peer_errors ? 1 : 0, 0) != 0;
  t.ucx_idle_progress_us = env_bytes("HPCTRAIN_UCX_IDLE_PROGRESS_US", t.ucx_idle_progress_us, 0);
  t.ucx_close_timeout_s = env_seconds("HPCTRAIN_UCX_CLOSE_TIMEOUT_S", t.ucx_close_timeout_s);
  return t;
}

}  // namespace hpctrain::coll
