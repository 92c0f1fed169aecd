#pragma once
// `hpctrain ml ...`: classical models fitted over all ranks (src/ml, docs/ml.md).
#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

#include "hpctrain/collectives/communicator.hpp"

namespace hpctrain::cli {

struct MlArgs {
  CLI::App* kmeans = nullptr;
  CLI::App* linreg = nullptr;
  CLI::App* logreg = nullptr;
  CLI::App* predict = nullptr;
  double l2 = 0.0;
  double logreg_l2 = 1e-4, logreg_tol = 1e-4, linreg_tol = 1e-8;
  std::string solver = "normal";
  std::string kmeans_stop = "shift";  ///< kmeans: shift (scikit-learn's rule) | inertia
  bool no_bounds = false;             ///< kmeans --no-bounds: every sample's scores every iteration
  std::string products = "f32";   ///< logreg: f32 (default) | f64  ///< linreg: normal | lbfgs
  std::string data, out, init = "kmeans-parallel";
  std::int64_t init_rounds = 5;
  double oversampling = 2.0;
  std::string model;      ///< predict: the model file
  std::string eval_data;  ///< logreg: test split for the test accuracy
  bool standardize = false;  ///< --standardize (kmeans, linreg, logreg)
  std::string metrics;    ///< JSONL: a record per iteration and a summary (rank 0)
  std::int64_t k = 0, max_iter = 300;
  double tol = 1e-4;
  std::uint64_t seed = 0;
};

/// Adds `ml` and its subcommands to `app`; returns the `ml` subcommand.
CLI::App* add_ml_commands(CLI::App& app, MlArgs& args);
/// Runs the parsed `ml` subcommand on every rank; returns the exit code.
int run_ml(const MlArgs& args, coll::Communicator& comm);

}  // namespace hpctrain::cli
