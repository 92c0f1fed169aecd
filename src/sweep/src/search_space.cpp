#include "hpctrain/sweep/search_space.hpp"

#include <cmath>
#include <fstream>

#include "hpctrain/base/error.hpp"

namespace hpctrain::sweep {

namespace {

using nlohmann::json;

std::string dashes(std::string key) {
  for (char& c : key) {
    if (c == '_') c = '-';
  }
  return key;
}

DistributionKind parse_kind(const std::string& name, const std::string& where) {
  if (name == "choice") return DistributionKind::choice;
  if (name == "uniform") return DistributionKind::uniform;
  if (name == "loguniform") return DistributionKind::loguniform;
  if (name == "randint") return DistributionKind::randint;
  if (name == "grid") return DistributionKind::grid;
  HPCTRAIN_FAIL(where + ": unknown distribution '" + name + "' (expected choice, uniform, loguniform, randint or grid)");
}

Distribution parse_distribution(const json& spec, const std::string& where) {
  HPCTRAIN_REQUIRE(spec.is_object() && spec.size() == 1,
                   where + ": must be an object with one distribution, e.g. {\"choice\": [0.8, 0.9]}, got " +
                       spec.dump());
  const auto& [name, args] = *spec.items().begin();
  Distribution d;
  d.kind = parse_kind(name, where);
  const std::string at = where + "." + name;
  HPCTRAIN_REQUIRE(args.is_array(), at + ": must be a list, got " + args.dump());
  if (d.kind == DistributionKind::choice || d.kind == DistributionKind::grid) {
    HPCTRAIN_REQUIRE(!args.empty(), at + ": the list of values is empty");
    for (const auto& v : args) {
      HPCTRAIN_REQUIRE(v.is_primitive() && !v.is_null(), at + ": values must be numbers, strings or booleans, got " +
                                                             v.dump());
      d.values.push_back(v);
    }
    return d;
  }
  HPCTRAIN_REQUIRE(args.size() == 2 && args[0].is_number() && args[1].is_number(),
                   at + ": must be [lo, hi] (two numbers), got " + args.dump());
  d.lo = args[0].get<double>();
  d.hi = args[1].get<double>();
  HPCTRAIN_REQUIRE(std::isfinite(d.lo) && std::isfinite(d.hi), at + ": bounds must be finite");
  HPCTRAIN_REQUIRE(d.lo <= d.hi, at + ": lo > hi (" + args[0].dump() + " > " + args[1].dump() + ")");
  if (d.kind == DistributionKind::loguniform) {
    HPCTRAIN_REQUIRE(d.lo > 0, at + ": lo must be positive for a log-uniform range, got " + args[0].dump());
  }
  if (d.kind == DistributionKind::randint) {
    HPCTRAIN_REQUIRE(args[0].is_number_integer() && args[1].is_number_integer(),
                     at + ": bounds must be integers, got " + args.dump());
    HPCTRAIN_REQUIRE(d.lo < d.hi, at + ": empty range: integers lo..hi-1 with lo = hi = " + args[0].dump());
  }
  return d;
}

void check_key(const std::string& name, const std::string& where, const OptionCheck& check_option) {
  const std::string why = check_option ? check_option(name) : std::string();
  HPCTRAIN_REQUIRE(why.empty(), where + ": " + why);
}

std::uint64_t splitmix64(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// Sizes of the keys that enumerate (grid, and choice under the grid algorithm).
bool enumerates(const Distribution& d, SearchAlgorithm algorithm) {
  return d.kind == DistributionKind::grid || (algorithm == SearchAlgorithm::grid && d.kind == DistributionKind::choice);
}

}  // namespace

double uniform01(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) noexcept {
  const std::uint64_t bits = splitmix64(splitmix64(splitmix64(seed) ^ stream) ^ index);
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

json draw(const Distribution& d, double u) {
  switch (d.kind) {
    case DistributionKind::choice:
    case DistributionKind::grid: {
      const auto i = std::min(d.values.size() - 1, static_cast<std::size_t>(u * static_cast<double>(d.values.size())));
      return d.values[i];
    }
    case DistributionKind::uniform:
      return d.lo + u * (d.hi - d.lo);
    case DistributionKind::loguniform:
      return std::exp(std::log(d.lo) + u * (std::log(d.hi) - std::log(d.lo)));
    case DistributionKind::randint:
      return static_cast<std::int64_t>(std::floor(d.lo + u * (d.hi - d.lo)));
  }
  return nullptr;
}

SearchSpace parse_search_space(const json& doc, const std::string& file, const OptionCheck& check_option) {
  const std::string where = "--space '" + file + "'";
  HPCTRAIN_REQUIRE(doc.is_object(), where + ": must hold a JSON object with \"base\" and \"search\"");
  SearchSpace space;
  space.file = file;
  for (const auto& [key, value] : doc.items()) {
    HPCTRAIN_REQUIRE(key == "base" || key == "search" || key == "search_algorithm" || key == "seed",
                     where + ": unknown key '" + key + "' (expected base, search, search_algorithm, seed)");
  }
  if (doc.contains("base")) {
    HPCTRAIN_REQUIRE(doc["base"].is_object(), where + ": \"base\" must be an object of train options");
    for (const auto& [key, value] : doc["base"].items()) {
      const std::string name = dashes(key);
      check_key(name, where + ": base." + key, check_option);
      space.base[name] = value;
    }
  }
  HPCTRAIN_REQUIRE(doc.contains("search") && doc["search"].is_object(),
                   where + ": \"search\" must be an object of option names and distributions");
  for (const auto& [key, spec] : doc["search"].items()) {
    const std::string name = dashes(key);
    check_key(name, where + ": search." + key, check_option);
    HPCTRAIN_REQUIRE(!space.base.contains(name), where + ": '" + key + "' is in both base and search");
    space.search.emplace_back(name, parse_distribution(spec, where + ": search." + key));
  }
  const std::string algorithm = doc.value("search_algorithm", std::string("random"));
  HPCTRAIN_REQUIRE(algorithm == "random" || algorithm == "grid",
                   where + ": search_algorithm: unknown '" + algorithm + "' (expected random or grid)");
  space.algorithm = algorithm == "grid" ? SearchAlgorithm::grid : SearchAlgorithm::random;
  if (doc.contains("seed")) {
    HPCTRAIN_REQUIRE(doc["seed"].is_number_unsigned(), where + ": seed must be a non-negative integer");
    space.seed = doc["seed"].get<std::uint64_t>();
    space.has_seed = true;
  }
  return space;
}

SearchSpace read_search_space(const std::string& file, const OptionCheck& check_option) {
  std::ifstream in(file);
  HPCTRAIN_REQUIRE(in.good(), "--space: cannot read '" + file + "'");
  json doc;
  try {
    doc = json::parse(in);
  } catch (const std::exception& e) {
    HPCTRAIN_FAIL("--space '" + file + "': not valid JSON: " + e.what());
  }
  return parse_search_space(doc, file, check_option);
}

std::vector<json> generate_trial_params(const SearchSpace& space, std::int64_t max_trials, std::uint64_t seed) {
  std::int64_t points = 1;  // size of the enumerated product
  for (const auto& [name, d] : space.search) {
    if (enumerates(d, space.algorithm)) points *= static_cast<std::int64_t>(d.values.size());
  }
  std::int64_t count = max_trials;
  if (space.algorithm == SearchAlgorithm::grid) count = max_trials > 0 ? std::min(points, max_trials) : points;
  std::vector<json> trials;
  for (std::int64_t t = 0; t < count; ++t) {
    json params = json::object();
    std::int64_t rest = t % points;
    std::int64_t stride = points;
    std::uint64_t stream = 0;
    for (const auto& [name, d] : space.search) {
      if (enumerates(d, space.algorithm)) {
        stride /= static_cast<std::int64_t>(d.values.size());
        params[name] = d.values[static_cast<std::size_t>(rest / stride)];
        rest %= stride;
      } else {
        params[name] = draw(d, uniform01(seed, static_cast<std::uint64_t>(t), stream));
      }
      ++stream;
    }
    trials.push_back(std::move(params));
  }
  return trials;
}

}  // namespace hpctrain::sweep
