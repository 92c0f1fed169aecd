// The tuning file (HPCTRAIN_TUNING_FILE, written by `hpctrain tune-collectives`): JSON with
// schema_version, the cost model's parameters and calibration, the knobs, and what was measured.
// Read strictly: an unknown key or a value out of range is an error naming the file and key.

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "hpctrain/base/error.hpp"
#include "hpctrain/collectives/tuning.hpp"
#include "modelled_algorithms.hpp"

namespace hpctrain::coll {

namespace {

using detail::bit;
using detail::kModelled;

constexpr int kSchemaVersion = 1;

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
    {"alpha_far_s", &CostModel::alpha_far_s},
    {"far_beta_scale", &CostModel::far_beta_scale},
    {"gamma_s_per_byte", &CostModel::gamma_s_per_byte},
    {"shm_beta_s_per_byte", &CostModel::shm_beta_s_per_byte},
    {"shm_sync_s", &CostModel::shm_sync_s},
};

/// Checked reads of one file's values; errors name the file and the key.
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

/// The file's JSON (not yet checked beyond being JSON).
nlohmann::json read_json(const std::string& path) {
  std::error_code ec;
  HPCTRAIN_REQUIRE(!std::filesystem::is_directory(path, ec),
                   "tuning file '" + path + "' is a directory, not a tuning file (HPCTRAIN_TUNING_FILE)");
  std::ifstream in(path);
  HPCTRAIN_REQUIRE(in.good(), "tuning file '" + path + "' cannot be read (HPCTRAIN_TUNING_FILE)");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    HPCTRAIN_FAIL("tuning file '" + path + "' is not valid JSON: " + e.what());
  } catch (const std::exception& e) {
    HPCTRAIN_FAIL("tuning file '" + path + "' cannot be read (HPCTRAIN_TUNING_FILE): " + e.what());
  }
}

void check_schema(const nlohmann::json& j, const FileReader& r) {
  HPCTRAIN_REQUIRE(j.is_object(), "tuning file '" + r.path + "' must hold a JSON object");
  HPCTRAIN_REQUIRE(j.contains("schema_version"), r.where("schema_version") + " is missing");
  HPCTRAIN_REQUIRE(j["schema_version"] == kSchemaVersion,
                   r.where("schema_version") + " is " + j["schema_version"].dump() +
                       "; this hpctrain reads version " + std::to_string(kSchemaVersion));
}

/// model.overhead_s: seconds per algorithm name.
void read_overhead(const nlohmann::json& v, const std::string& full, const FileReader& r, CostModel& m) {
  HPCTRAIN_REQUIRE(v.is_object(), r.where(full) + " must be an object of algorithm names");
  for (const auto& [algo, s] : v.items()) {
    const Algorithm a = parse_algorithm(algo, r.where(full + "." + algo));
    m.overhead_s[static_cast<std::size_t>(a)] = r.seconds(s, full + "." + algo);
  }
}

/// model.calibration.bytes: increasing positive byte counts.
std::vector<double> read_calibration_sizes(const nlohmann::json& sizes, const std::string& key, const FileReader& r) {
  HPCTRAIN_REQUIRE(sizes.is_array() && !sizes.empty(), r.where(key) + " must be a non-empty list");
  std::vector<double> bytes;
  for (const auto& b : sizes) {
    HPCTRAIN_REQUIRE(b.is_number_unsigned() && b.get<std::uint64_t>() > 0 &&
                         (bytes.empty() || static_cast<double>(b.get<std::uint64_t>()) > bytes.back()),
                     r.where(key) + " must list increasing positive byte counts (got " + sizes.dump() + ")");
    bytes.push_back(static_cast<double>(b.get<std::uint64_t>()));
  }
  return bytes;
}

/// model.calibration: {"bytes": [...], "scale": {algorithm: [one positive factor per size]}}.
void read_calibration(const nlohmann::json& v, const std::string& full, const FileReader& r, CostModel& m) {
  HPCTRAIN_REQUIRE(v.is_object() && v.contains("bytes") && v.contains("scale") && v.size() == 2,
                   r.where(full) + " must be an object with 'bytes' and 'scale'");
  std::vector<double> bytes = read_calibration_sizes(v["bytes"], full + ".bytes", r);
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
  m.calibration_bytes = std::move(bytes);
  m.calibration_scale = std::move(scale);
}

/// The "model" object: the α/β/γ parameters, overhead_s and calibration.
void read_model(const nlohmann::json& value, const FileReader& r, CostModel& m) {
  HPCTRAIN_REQUIRE(value.is_object(), r.where("model") + " must be an object");
  for (const auto& [name, v] : value.items()) {
    const std::string full = "model." + name;
    if (name == "overhead_s") {
      read_overhead(v, full, r, m);
    } else if (name == "calibration") {
      read_calibration(v, full, r, m);
    } else if (name == "nodes_per_switch") {
      m.nodes_per_switch = r.count(v, full, 0);
    } else if (name == "eager_bytes") {
      m.eager_bytes = r.count(v, full, 0);
    } else {
      const auto* k = std::find_if(std::begin(kModelKeys), std::end(kModelKeys),
                                   [&n = name](const ModelKey& key) { return n == key.name; });  // clang < 16: no capture of a structured binding
      HPCTRAIN_REQUIRE(k != std::end(kModelKeys), r.where(full) + " is not a cost model parameter");
      m.*(k->field) = r.seconds(v, full);
    }
  }
}

/// knobs.auto_algorithms: a list of modelled algorithm names.
std::uint32_t read_auto_algorithms(const nlohmann::json& v, const std::string& full, const FileReader& r) {
  HPCTRAIN_REQUIRE(v.is_array(), r.where(full) + " must be a list of algorithm names");
  std::string list;
  for (const auto& a : v) {
    HPCTRAIN_REQUIRE(a.is_string(), r.where(full) + " must be a list of algorithm names");
    list += a.get<std::string>() + ",";
  }
  return parse_auto_algorithms(list, r.where(full));
}

/// The "knobs" object (the ones a file may set; the rest are environment-only).
void read_knobs(const nlohmann::json& value, const FileReader& r, Tuning& t) {
  HPCTRAIN_REQUIRE(value.is_object(), r.where("knobs") + " must be an object");
  for (const auto& [name, v] : value.items()) {
    const std::string full = "knobs." + name;
    if (name == "allreduce_algorithm") t.allreduce_algorithm = r.algorithm(v, full);
    else if (name == "auto_algorithms") t.auto_algorithms = read_auto_algorithms(v, full, r);
    else if (name == "ring_segment_bytes") t.ring_segment_bytes = r.count(v, full, 4096);
    else if (name == "ring_window") t.ring_window = r.count(v, full, 1);
    else if (name == "tree_segment_bytes") t.tree_segment_bytes = r.count(v, full, 4096);
    else if (name == "tree_binomial_max_bytes") t.tree_binomial_max_bytes = r.count(v, full, 0);
    else if (name == "rabenseifner_segment_bytes") t.rabenseifner_segment_bytes = r.count(v, full, 4096);
    else if (name == "spin_polls") t.spin_polls = r.count(v, full, 0);
    else HPCTRAIN_FAIL(r.where(full) + " is not a tuning knob");
  }
}

}  // namespace

Tuning Tuning::from_file(const std::string& path, const Tuning& base) {
  const nlohmann::json j = read_json(path);
  const FileReader r{path};
  check_schema(j, r);
  Tuning t = base;
  for (const auto& [key, value] : j.items()) {
    if (key == "schema_version" || key == "measured") continue;
    if (key == "model") read_model(value, r, t.model);
    else if (key == "knobs") read_knobs(value, r, t);
    else HPCTRAIN_FAIL(r.where(key) + " is unknown (expected schema_version, model, knobs, measured)");
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
  m["nodes_per_switch"] = model.nodes_per_switch;
  m["eager_bytes"] = model.eager_bytes;
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

}  // namespace hpctrain::coll
