#pragma once
/// @file
/// A sweep's search space: SPACE.json parsed and checked, and the trials' parameters drawn from
/// it. MPI-free.
///
/// SPACE.json (the contract; extend it, do not change it):
///   {"base": {"model": "mlp", "epochs": 2},
///    "search": {"lr": {"loguniform": [0.001, 0.2]}, "momentum": {"choice": [0.8, 0.9]},
///               "global-batch": {"choice": [64, 128]}},
///    "search_algorithm": "random", "seed": 1}
/// `base` and `search` keys are `hpctrain train`'s long option names as `--config` takes them
/// (`global_batch` and `global-batch` are one key). Distributions: `choice` [v...] (uniform over
/// the values), `uniform` [lo, hi], `loguniform` [lo, hi] (lo > 0; uniform in log), `randint`
/// [lo, hi] (integers lo..hi-1, as Ray Tune's), `grid` [v...] (every value, each in its own trials).

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace hpctrain::sweep {

enum class DistributionKind { choice, uniform, loguniform, randint, grid };

struct Distribution {
  DistributionKind kind = DistributionKind::choice;
  std::vector<nlohmann::json> values;  ///< choice, grid
  double lo = 0.0, hi = 0.0;           ///< uniform, loguniform, randint
  /// Whether PBT may perturb it (a continuous range: uniform, loguniform).
  bool continuous() const noexcept {
    return kind == DistributionKind::uniform || kind == DistributionKind::loguniform;
  }
};

enum class SearchAlgorithm { random, grid };

struct SearchSpace {
  std::string file;               ///< where it came from (named in errors)
  nlohmann::json base = nlohmann::json::object();  ///< option name (dashes) -> value
  std::vector<std::pair<std::string, Distribution>> search;  ///< in the file's key order
  SearchAlgorithm algorithm = SearchAlgorithm::random;
  std::uint64_t seed = 0;
  bool has_seed = false;  ///< the file gave "seed"
};

/// Whether `name` (dashes) is an `hpctrain train` option a sweep may set; a non-empty string is
/// the reason it may not ("set by the sweep itself"). The CLI supplies it from its flag table.
using OptionCheck = std::function<std::string(const std::string& name)>;

/// Parses and checks a SPACE.json document. Throws hpctrain::Error naming `file` and the key
/// (unknown distribution, empty choice or grid, lo > hi, loguniform lo <= 0, non-integer randint
/// bounds, unknown or reserved option, a key in both base and search, unknown search_algorithm).
SearchSpace parse_search_space(const nlohmann::json& document, const std::string& file,
                               const OptionCheck& check_option);

/// Reads and parses `file` (errors name it).
SearchSpace read_search_space(const std::string& file, const OptionCheck& check_option);

/// The parameters (search keys only) of trials 0..max_trials-1, a pure function of the space and
/// `seed`: trial i's random draws come from a generator seeded by (seed, i).
/// random: `max_trials` trials; the grid keys' cartesian product is cycled through (trial i gets
///   point i mod G), every other key is drawn.
/// grid: the cartesian product of the `grid` and `choice` keys (first key slowest), every other
///   key drawn; at most `max_trials` of them (0 = all).
std::vector<nlohmann::json> generate_trial_params(const SearchSpace& space, std::int64_t max_trials,
                                                  std::uint64_t seed);

/// One draw of `d` from a uniform number u in [0, 1).
nlohmann::json draw(const Distribution& d, double u);

/// A counter-based uniform double in [0, 1) for (seed, stream, index): the same on every
/// machine and standard library.
double uniform01(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) noexcept;

}  // namespace hpctrain::sweep
