#include "hpctrain/collectives/tuning.hpp"

#include <cerrno>
#include <cstdlib>
#include <string>

#include "hpctrain/collectives/error.hpp"

namespace hpctrain::coll {

namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

std::size_t env_bytes(const char* name, std::size_t fallback, std::size_t min_value) {
  const char* v = env(name);
  if (!v) return fallback;
  errno = 0;
  char* end = nullptr;
  const unsigned long long parsed = std::strtoull(v, &end, 10);
  std::size_t scale = 1;
  std::string suffix = end ? end : "";
  if (suffix == "K" || suffix == "KiB") scale = std::size_t{1} << 10;
  else if (suffix == "M" || suffix == "MiB") scale = std::size_t{1} << 20;
  else if (suffix == "G" || suffix == "GiB") scale = std::size_t{1} << 30;
  else if (!suffix.empty()) scale = 0;
  HPCTRAIN_REQUIRE(errno == 0 && end != v && scale != 0 && v[0] != '-',
                   std::string(name) + "='" + v +
                       "' is not a byte count (expected an integer, optionally with K/M/G)");
  const std::size_t value = static_cast<std::size_t>(parsed) * scale;
  HPCTRAIN_REQUIRE(value >= min_value, std::string(name) + "='" + v + "' must be at least " +
                                           std::to_string(min_value));
  return value;
}

double env_seconds(const char* name, double fallback) {
  const char* v = env(name);
  if (!v) return fallback;
  char* end = nullptr;
  errno = 0;
  const double s = std::strtod(v, &end);
  HPCTRAIN_REQUIRE(errno == 0 && end != v && *end == '\0' && s >= 0.0,
                   std::string(name) + "='" + v + "' is not a non-negative number of seconds");
  return s;
}

}  // namespace

const char* to_string(TransportKind k) noexcept { return k == TransportKind::ucx ? "ucx" : "mpi"; }

TransportKind parse_transport_kind(const std::string& name, const char* where) {
  if (name == "mpi") return TransportKind::mpi;
  if (name == "ucx") return TransportKind::ucx;
  HPCTRAIN_FAIL(std::string(where) + "='" + name + "' is not a transport (expected mpi or ucx)");
}

Tuning Tuning::from_environment() {
  Tuning t;
  if (const char* v = env("HPCTRAIN_ALLREDUCE_ALGO")) {
    t.allreduce_algorithm = parse_algorithm(v, "HPCTRAIN_ALLREDUCE_ALGO");
  }
  if (const char* v = env("HPCTRAIN_COLL_TIMEOUT_S")) {
    char* end = nullptr;
    errno = 0;
    const double s = std::strtod(v, &end);
    HPCTRAIN_REQUIRE(errno == 0 && end != v && *end == '\0' && s >= 0.0,
                     std::string("HPCTRAIN_COLL_TIMEOUT_S='") + v +
                         "' is not a non-negative number of seconds (0 disables the timeout)");
    t.timeout_s = s;
  }
  // Segments below 4 KiB cost more in per-message latency than they gain in overlap.
  t.ring_segment_bytes = env_bytes("HPCTRAIN_RING_SEGMENT_BYTES", t.ring_segment_bytes, 4096);
  t.ring_window = env_bytes("HPCTRAIN_RING_WINDOW", t.ring_window, 1);
  t.tree_segment_bytes = env_bytes("HPCTRAIN_TREE_SEGMENT_BYTES", t.tree_segment_bytes, 4096);
  t.tree_binomial_max_bytes =
      env_bytes("HPCTRAIN_TREE_BINOMIAL_MAX_BYTES", t.tree_binomial_max_bytes, 0);
  t.auto_tree_max_bytes = env_bytes("HPCTRAIN_AUTO_TREE_MAX_BYTES", t.auto_tree_max_bytes, 0);
  t.spin_polls = env_bytes("HPCTRAIN_SPIN_POLLS", t.spin_polls, 0);
  t.ranks_per_node = static_cast<int>(env_bytes("HPCTRAIN_RANKS_PER_NODE", 0, 0));
  // Below 4 KiB per segment the two barriers of a segment cost more than its copies.
  t.shm_segment_bytes = env_bytes("HPCTRAIN_SHM_SEGMENT_BYTES", t.shm_segment_bytes, 4096);
  t.shm_small_max_bytes = env_bytes("HPCTRAIN_SHM_SMALL_MAX_BYTES", t.shm_small_max_bytes, 0);
  if (const char* v = env("HPCTRAIN_TRANSPORT")) t.transport = parse_transport_kind(v, "HPCTRAIN_TRANSPORT");
  t.ucx_reg_min_bytes = env_bytes("HPCTRAIN_UCX_REG_MIN_BYTES", t.ucx_reg_min_bytes, 0);
  t.ucx_reg_max_entries = env_bytes("HPCTRAIN_UCX_REG_MAX_ENTRIES", t.ucx_reg_max_entries, 0);
  t.ucx_peer_errors = env_bytes("HPCTRAIN_UCX_PEER_ERRORS", t.ucx_peer_errors ? 1 : 0, 0) != 0;
  t.ucx_idle_progress_us = env_bytes("HPCTRAIN_UCX_IDLE_PROGRESS_US", t.ucx_idle_progress_us, 0);
  t.ucx_close_timeout_s = env_seconds("HPCTRAIN_UCX_CLOSE_TIMEOUT_S", t.ucx_close_timeout_s);
  return t;
}

Algorithm Tuning::choose_allreduce(std::size_t bytes, int ranks, int ranks_per_node) const noexcept {
  if (allreduce_algorithm != Algorithm::automatic) return allreduce_algorithm;
  // Latency-bound messages: the tree's lg p steps beat the ring's 2(p-1).
  // Bandwidth-bound: the ring moves the minimum 2(p-1)/p n bytes per rank.
  (void)ranks;
  (void)ranks_per_node;
  return bytes <= auto_tree_max_bytes ? Algorithm::tree : Algorithm::ring;
}

}  // namespace hpctrain::coll
