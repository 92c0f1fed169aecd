#include "hpctrain/collectives/tuning.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
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
  const std::size_t value = parse_byte_count(v, name);
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
  t.rabenseifner_segment_bytes =
      env_bytes("HPCTRAIN_RABENSEIFNER_SEGMENT_BYTES", t.rabenseifner_segment_bytes, 4096);
  t.tree_binomial_max_bytes =
      env_bytes("HPCTRAIN_TREE_BINOMIAL_MAX_BYTES", t.tree_binomial_max_bytes, 0);
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

// ---- tuning file ----------------------------------------------------------------------------

namespace {

constexpr int kSchemaVersion = 1;
// Tuning::kAllModelled and CostModel::overhead_s are laid out by these enum values.
static_assert(static_cast<int>(Algorithm::automatic) == 0 && static_cast<int>(Algorithm::mpi) == 3 &&
                  static_cast<std::size_t>(Algorithm::hierarchical) + 1 == kAlgorithmCount,
              "update Tuning::kAllModelled and kAlgorithmCount with the Algorithm enum");
constexpr Algorithm kModelled[] = {Algorithm::ring, Algorithm::tree, Algorithm::recursive_doubling,
                                   Algorithm::rabenseifner, Algorithm::shm, Algorithm::hierarchical};
constexpr std::uint32_t bit(Algorithm a) { return 1u << static_cast<unsigned>(a); }

// The model's numeric keys, in file order.
struct ModelKey {
  const char* name;
  double CostModel::*field;
};
constexpr ModelKey kModelKeys[] = {
    {"alpha_intra_s", &CostModel::alpha_intra_s},
    {"beta_intra_s_per_byte", &CostModel::beta_intra_s_per_byte},
    {"alpha_inter_s", &CostModel::alpha_inter_s},
    {"beta_inter_s_per_byte", &CostModel::beta_inter_s_per_byte},
    {"gamma_s_per_byte", &CostModel::gamma_s_per_byte},
    {"shm_beta_s_per_byte", &CostModel::shm_beta_s_per_byte},
    {"shm_sync_s", &CostModel::shm_sync_s},
};

struct FileReader {
  const std::string& path;
  std::string where(const std::string& key) const { return "tuning file '" + path + "': key '" + key + "'"; }
  double seconds(const nlohmann::json& v, const std::string& key) const {
    HPCTRAIN_REQUIRE(v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() >= 0.0,
                     where(key) + " must be a finite non-negative number (got " + v.dump() + ")");
    return v.get<double>();
  }
  std::size_t count(const nlohmann::json& v, const std::string& key, std::size_t min_value) const {
    HPCTRAIN_REQUIRE(v.is_number_unsigned() && v.get<std::uint64_t>() >= min_value,
                     where(key) + " must be an integer >= " + std::to_string(min_value) + " (got " +
                         v.dump() + ")");
    return static_cast<std::size_t>(v.get<std::uint64_t>());
  }
  Algorithm algorithm(const nlohmann::json& v, const std::string& key) const {
    HPCTRAIN_REQUIRE(v.is_string(), where(key) + " must be an algorithm name (got " + v.dump() + ")");
    return parse_algorithm(v.get<std::string>(), where(key));
  }
};

}  // namespace

std::uint32_t parse_auto_algorithms(const std::string& list, const std::string& where) {
  std::uint32_t bits = 0;
  std::stringstream in(list);
  for (std::string name; std::getline(in, name, ',');) {
    if (name.empty()) continue;
    const Algorithm a = parse_algorithm(name, where);
    HPCTRAIN_REQUIRE(a != Algorithm::automatic && a != Algorithm::mpi,
                     where + "='" + list + "': '" + name +
                         "' is not a modelled algorithm (expected ring, tree, recursive_doubling, "
                         "rabenseifner, shm, hierarchical)");
    bits |= bit(a);
  }
  HPCTRAIN_REQUIRE(bits != 0, where + "='" + list + "' names no algorithm");
  return bits;
}

Tuning Tuning::from_file(const std::string& path, const Tuning& base) {
  std::error_code ec;
  HPCTRAIN_REQUIRE(!std::filesystem::is_directory(path, ec),
                   "tuning file '" + path + "' is a directory, not a tuning file (HPCTRAIN_TUNING_FILE)");
  std::ifstream in(path);
  HPCTRAIN_REQUIRE(in.good(), "tuning file '" + path + "' cannot be read (HPCTRAIN_TUNING_FILE)");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    HPCTRAIN_FAIL("tuning file '" + path + "' is not valid JSON: " + e.what());
  } catch (const std::exception& e) {
    HPCTRAIN_FAIL("tuning file '" + path + "' cannot be read (HPCTRAIN_TUNING_FILE): " + e.what());
  }
  const FileReader r{path};
  HPCTRAIN_REQUIRE(j.is_object(), "tuning file '" + path + "' must hold a JSON object");
  HPCTRAIN_REQUIRE(j.contains("schema_version"), r.where("schema_version") + " is missing");
  HPCTRAIN_REQUIRE(j["schema_version"] == kSchemaVersion,
                   r.where("schema_version") + " is " + j["schema_version"].dump() +
                       "; this hpctrain reads version " + std::to_string(kSchemaVersion));
  Tuning t = base;
  for (const auto& [key, value] : j.items()) {
    if (key == "schema_version" || key == "measured") continue;
    if (key == "model") {
      HPCTRAIN_REQUIRE(value.is_object(), r.where("model") + " must be an object");
      for (const auto& [name, v] : value.items()) {
        const std::string full = "model." + name;
        if (name == "overhead_s") {
          HPCTRAIN_REQUIRE(v.is_object(), r.where(full) + " must be an object of algorithm names");
          for (const auto& [algo, s] : v.items()) {
            const Algorithm a = parse_algorithm(algo, r.where(full + "." + algo));
            t.model.overhead_s[static_cast<std::size_t>(a)] = r.seconds(s, full + "." + algo);
          }
          continue;
        }
        if (name == "calibration") {
          HPCTRAIN_REQUIRE(v.is_object() && v.contains("bytes") && v.contains("scale") && v.size() == 2,
                           r.where(full) + " must be an object with 'bytes' and 'scale'");
          const auto& sizes = v["bytes"];
          HPCTRAIN_REQUIRE(sizes.is_array() && !sizes.empty(), r.where(full + ".bytes") + " must be a non-empty list");
          std::vector<double> bytes;
          for (const auto& b : sizes) {
            HPCTRAIN_REQUIRE(b.is_number_unsigned() && b.get<std::uint64_t>() > 0 &&
                                 (bytes.empty() || static_cast<double>(b.get<std::uint64_t>()) > bytes.back()),
                             r.where(full + ".bytes") + " must list increasing positive byte counts (got " +
                                 sizes.dump() + ")");
            bytes.push_back(static_cast<double>(b.get<std::uint64_t>()));
          }
          HPCTRAIN_REQUIRE(v["scale"].is_object(), r.where(full + ".scale") + " must be an object of algorithm names");
          std::array<std::vector<double>, kAlgorithmCount> scale{};
          for (const auto& [algo, list] : v["scale"].items()) {
            const std::string where = full + ".scale." + algo;
            const Algorithm a = parse_algorithm(algo, r.where(where));
            HPCTRAIN_REQUIRE(list.is_array() && list.size() == bytes.size(),
                             r.where(where) + " must list one scale per entry of " + full + ".bytes");
            for (const auto& x : list) {
              HPCTRAIN_REQUIRE(x.is_number() && std::isfinite(x.get<double>()) && x.get<double>() > 0.0,
                               r.where(where) + " must hold finite positive numbers (got " + list.dump() + ")");
              scale[static_cast<std::size_t>(a)].push_back(x.get<double>());
            }
          }
          t.model.calibration_bytes = std::move(bytes);
          t.model.calibration_scale = std::move(scale);
          continue;
        }
        const auto* k = std::find_if(std::begin(kModelKeys), std::end(kModelKeys),
                                     [&key = name](const ModelKey& m) { return key == m.name; });
        HPCTRAIN_REQUIRE(k != std::end(kModelKeys), r.where(full) + " is not a cost model parameter");
        t.model.*(k->field) = r.seconds(v, full);
      }
    } else if (key == "knobs") {
      HPCTRAIN_REQUIRE(value.is_object(), r.where("knobs") + " must be an object");
      for (const auto& [name, v] : value.items()) {
        const std::string full = "knobs." + name;
        if (name == "allreduce_algorithm") t.allreduce_algorithm = r.algorithm(v, full);
        else if (name == "auto_algorithms") {
          HPCTRAIN_REQUIRE(v.is_array(), r.where(full) + " must be a list of algorithm names");
          std::string list;
          for (const auto& a : v) {
            HPCTRAIN_REQUIRE(a.is_string(), r.where(full) + " must be a list of algorithm names");
            list += a.get<std::string>() + ",";
          }
          t.auto_algorithms = parse_auto_algorithms(list, r.where(full));
        } else if (name == "ring_segment_bytes") t.ring_segment_bytes = r.count(v, full, 4096);
        else if (name == "ring_window") t.ring_window = r.count(v, full, 1);
        else if (name == "tree_segment_bytes") t.tree_segment_bytes = r.count(v, full, 4096);
        else if (name == "tree_binomial_max_bytes") t.tree_binomial_max_bytes = r.count(v, full, 0);
        else if (name == "rabenseifner_segment_bytes") t.rabenseifner_segment_bytes = r.count(v, full, 4096);
        else if (name == "spin_polls") t.spin_polls = r.count(v, full, 0);
        else HPCTRAIN_FAIL(r.where(full) + " is not a tuning knob");
      }
    } else {
      HPCTRAIN_FAIL(r.where(key) + " is unknown (expected schema_version, model, knobs, measured)");
    }
  }
  t.tuning_file = path;
  return t;
}

Tuning Tuning::from_file(const std::string& path) { return from_file(path, Tuning{}); }

std::string Tuning::to_json(const std::string& measured_json) const {
  nlohmann::ordered_json j;
  j["schema_version"] = kSchemaVersion;
  nlohmann::ordered_json& m = j["model"];
  for (const ModelKey& k : kModelKeys) m[k.name] = model.*(k.field);
  nlohmann::ordered_json overhead = nlohmann::ordered_json::object();
  for (Algorithm a : kModelled) overhead[std::string(to_string(a))] = model.overhead_s[static_cast<std::size_t>(a)];
  m["overhead_s"] = overhead;
  if (!model.calibration_bytes.empty()) {
    nlohmann::ordered_json cal;
    nlohmann::ordered_json sizes = nlohmann::ordered_json::array();
    for (double b : model.calibration_bytes) sizes.push_back(static_cast<std::uint64_t>(b));
    cal["bytes"] = sizes;
    nlohmann::ordered_json scale = nlohmann::ordered_json::object();
    for (Algorithm a : kModelled) {
      const auto& list = model.calibration_scale[static_cast<std::size_t>(a)];
      if (!list.empty()) scale[std::string(to_string(a))] = list;
    }
    cal["scale"] = scale;
    m["calibration"] = cal;
  }
  nlohmann::ordered_json& k = j["knobs"];
  k["allreduce_algorithm"] = std::string(to_string(allreduce_algorithm));
  nlohmann::ordered_json algos = nlohmann::ordered_json::array();
  for (Algorithm a : kModelled) {
    if (auto_algorithms & bit(a)) algos.push_back(std::string(to_string(a)));
  }
  k["auto_algorithms"] = algos;
  k["ring_segment_bytes"] = ring_segment_bytes;
  k["ring_window"] = ring_window;
  k["tree_segment_bytes"] = tree_segment_bytes;
  k["tree_binomial_max_bytes"] = tree_binomial_max_bytes;
  k["rabenseifner_segment_bytes"] = rabenseifner_segment_bytes;
  k["spin_polls"] = spin_polls;
  try {
    j["measured"] = nlohmann::ordered_json::parse(measured_json);
  } catch (const nlohmann::ordered_json::exception& e) {
    HPCTRAIN_FAIL(std::string("Tuning::to_json: `measured` is not valid JSON: ") + e.what());
  }
  return j.dump(2) + "\n";
}

void Tuning::save(const std::string& path, const std::string& measured_json) const {
  const std::string text = to_json(measured_json);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    HPCTRAIN_REQUIRE(out.good(), "cannot write tuning file '" + tmp + "'");
    out << text;
    out.close();
    HPCTRAIN_REQUIRE(!out.fail(), "writing tuning file '" + tmp + "' failed");
  }
  HPCTRAIN_REQUIRE(std::rename(tmp.c_str(), path.c_str()) == 0,
                   "cannot rename '" + tmp + "' to tuning file '" + path + "'");
}

// ---- cost model -------------------------------------------------------------------------------
// The formulas are in tuning.hpp's file comment; the functions below follow it term by term.

namespace {

int ceil_lg(int p) {
  int l = 0;
  while ((1 << l) < p) ++l;
  return l;
}
int floor_lg(int p) {
  int l = 0;
  while ((2 << l) <= p) ++l;
  return l;
}

struct Link {
  double alpha, beta;
};

double fold_s(double n, int p, Link l, double gamma) {
  return p == (1 << floor_lg(p)) ? 0.0 : 2.0 * (l.alpha + n * l.beta) + n * gamma;
}

double ring_s(double n, int p, Link l, double gamma, double segment) {
  if (p <= 1) return 0.0;
  const double chunk = n / p;
  const double segments = std::max(1.0, std::ceil(chunk / segment));
  return 2.0 * (p - 1) * segments * l.alpha + 2.0 * (p - 1) * chunk * l.beta + (p - 1) * chunk * gamma;
}

double tree_s(double n, int p, Link l, double gamma, double segment, double binomial_max) {
  if (p <= 1) return 0.0;
  const double depth = ceil_lg(p);
  // Binomial: the reduce's last and the broadcast's first step are one exchange (tree_allreduce.cpp).
  if (n <= binomial_max) return (2.0 * depth - 1.0) * (l.alpha + n * l.beta) + depth * n * gamma;
  const double s = std::min(segment, n / 2);
  const double steps = depth + std::ceil(n / (2 * s)) - 1;
  return steps * (4.0 * l.alpha + 4.0 * s * l.beta + 2.0 * s * gamma);
}

double recursive_doubling_s(double n, int p, Link l, double gamma) {
  if (p <= 1) return 0.0;
  return floor_lg(p) * (l.alpha + n * l.beta + n * gamma) + fold_s(n, p, l, gamma);
}

double rabenseifner_s(double n, int p, Link l, double gamma) {
  if (p <= 1) return 0.0;
  const int lg = floor_lg(p);
  const double q = static_cast<double>(1 << lg);
  return 2.0 * lg * l.alpha + 2.0 * (q - 1) / q * n * l.beta + (q - 1) / q * n * gamma +
         fold_s(n, p, l, gamma);
}

// shm on one node of k ranks: the better of the sliced (large) and the all-inputs (small) schedule.
double shm_s(double n, int k, double sync, double shm_beta, double gamma) {
  if (k <= 1) return 0.0;
  const double large = 2.0 * sync + 2.0 * n * shm_beta + (k - 1.0) / k * n * gamma;
  const double small = sync + n * shm_beta + (k - 1.0) * n * gamma;
  return std::min(large, small);
}

}  // namespace

double CostModel::calibration(Algorithm algo, double bytes) const noexcept {
  const auto& scale = calibration_scale[static_cast<std::size_t>(algo)];
  if (scale.empty() || scale.size() != calibration_bytes.size()) return 1.0;
  if (bytes <= calibration_bytes.front()) return scale.front();
  if (bytes >= calibration_bytes.back()) return scale.back();
  std::size_t i = 1;
  while (calibration_bytes[i] < bytes) ++i;
  const double f = std::log2(bytes / calibration_bytes[i - 1]) / std::log2(calibration_bytes[i] / calibration_bytes[i - 1]);
  return scale[i - 1] + f * (scale[i] - scale[i - 1]);
}

double Tuning::predict_allreduce_s(Algorithm algo, std::size_t bytes, int ranks, int ranks_per_node) const noexcept {
  constexpr double kNever = std::numeric_limits<double>::infinity();
  if (algo == Algorithm::automatic || algo == Algorithm::mpi || ranks < 1) return kNever;
  const double n = static_cast<double>(bytes);
  // The terms in α and synchronisations stay; every β and γ is scaled by the calibration.
  return formula_s(algo, n, ranks, ranks_per_node, model.calibration(algo, n)) +
         model.overhead_s[static_cast<std::size_t>(algo)];
}

double Tuning::formula_s(Algorithm algo, double n, int ranks, int ranks_per_node, double byte_scale) const noexcept {
  constexpr double kNever = std::numeric_limits<double>::infinity();
  if (algo == Algorithm::automatic || algo == Algorithm::mpi || ranks < 1) return kNever;
  const int k = (ranks_per_node <= 0 || ranks_per_node > ranks) ? ranks : ranks_per_node;
  const int nodes = (ranks + k - 1) / k;
  const double gamma = model.gamma_s_per_byte * byte_scale;
  const double shm_beta = model.shm_beta_s_per_byte * byte_scale;
  const double beta_inter = model.beta_inter_s_per_byte * byte_scale;
  const Link flat = nodes > 1 ? Link{model.alpha_inter_s, beta_inter}
                              : Link{model.alpha_intra_s, model.beta_intra_s_per_byte * byte_scale};
  const double ring_seg = static_cast<double>(ring_segment_bytes);
  const double tree_seg = static_cast<double>(tree_segment_bytes);
  const double binomial_max = static_cast<double>(tree_binomial_max_bytes);
  double t = kNever;
  switch (algo) {
    case Algorithm::ring: t = ring_s(n, ranks, flat, gamma, ring_seg); break;
    case Algorithm::tree: t = tree_s(n, ranks, flat, gamma, tree_seg, binomial_max); break;
    case Algorithm::recursive_doubling: t = recursive_doubling_s(n, ranks, flat, gamma); break;
    case Algorithm::rabenseifner: t = rabenseifner_s(n, ranks, flat, gamma); break;
    case Algorithm::shm:
      if (nodes == 1) t = shm_s(n, ranks, model.shm_sync_s, shm_beta, gamma);
      break;
    case Algorithm::hierarchical:
      if (nodes >= 2 && k > 1) {
        const double slice = n / k;
        const Link inter{model.alpha_inter_s, beta_inter * k};
        const double across = std::min({ring_s(slice, nodes, inter, gamma, ring_seg),
                                        tree_s(slice, nodes, inter, gamma, tree_seg, binomial_max),
                                        recursive_doubling_s(slice, nodes, inter, gamma),
                                        rabenseifner_s(slice, nodes, inter, gamma)});
        t = 2.0 * model.shm_sync_s + 2.0 * n * shm_beta + (k - 1.0) / k * n * gamma + across;
      }
      break;
    case Algorithm::automatic:
    case Algorithm::mpi: break;
  }
  return t;
}

Algorithm Tuning::choose_allreduce(std::size_t bytes, int ranks, int ranks_per_node) const noexcept {
  if (allreduce_algorithm != Algorithm::automatic) return allreduce_algorithm;
  return cheapest_allreduce(bytes, ranks, ranks_per_node, auto_algorithms);
}

Algorithm Tuning::cheapest_allreduce(std::size_t bytes, int ranks, int ranks_per_node,
                                     std::uint32_t candidates) const noexcept {
  Algorithm best = Algorithm::ring;
  double best_s = std::numeric_limits<double>::infinity();
  for (Algorithm a : kModelled) {
    if (!(candidates & bit(a))) continue;
    const double s = predict_allreduce_s(a, bytes, ranks, ranks_per_node);
    if (s < best_s) {
      best = a;
      best_s = s;
    }
  }
  return best;
}

}  // namespace hpctrain::coll
