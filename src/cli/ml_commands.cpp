#include "ml_commands.hpp"

#include <chrono>
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "hpctrain/base/error.hpp"
#include "hpctrain/ml/dataset_slice.hpp"
#include "hpctrain/ml/feature_scaling.hpp"
#include "hpctrain/ml/kmeans.hpp"
#include "hpctrain/ml/linear_regression.hpp"
#include "hpctrain/ml/logistic_regression.hpp"
#include "hpctrain/ml/model_file.hpp"
#include "hpctrain/ml/prediction.hpp"

namespace hpctrain::cli {

namespace {

ml::SliceColumns regression_columns() {
  ml::SliceColumns c;
  c.targets = true;
  return c;
}

ml::SliceColumns classification_columns() {
  ml::SliceColumns c;
  c.labels = true;
  return c;
}

/// `--metrics` JSONL on rank 0: records of "type" "iteration", then one "summary".
class MetricsFile {
 public:
  MetricsFile(const std::string& path, bool writer) {
    if (path.empty() || !writer) return;
    out_.open(path, std::ios::trunc);
    HPCTRAIN_REQUIRE(out_.good(), "--metrics '" + path + "': cannot open for writing");
  }
  void write(nlohmann::json record) {
    if (!out_.is_open()) return;
    out_ << record.dump() << '\n';
    out_.flush();
  }

 private:
  std::ofstream out_;
};

/// Seconds since `start` (the fits' `fit_seconds`: after the data is read, before the model is written).
double squared_norm(const std::vector<double>& v) {
  double s = 0.0;
  for (double x : v) s += x * x;
  return s;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

/// The samples as a fitter sees them: this rank's slice, the data checksum (before
/// standardisation) and, with --standardize, the scaling applied to the slice.
struct FitData {
  ml::SamplePartition part;
  ml::DatasetSlice data;
  std::string checksum;
  bool standardized = false;
  ml::Standardization scaling;
};

/// `as_f64`: the samples as f64 rows (DatasetSlice::widen_all) for a fitter that reads row();
/// otherwise a uint8 file's samples stay as stored and the fitter widens them block by block.
FitData read_fit_data(const MlArgs& a, coll::Communicator& comm, ml::SliceColumns columns, bool as_f64 = false) {
  FitData f;
  ml::RankSlice slice = ml::read_rank_slice(a.data, comm.rank(), comm.size(), columns);
  f.part = slice.part;
  f.data = std::move(slice.data);
  if (as_f64) f.data.widen_all();
  f.checksum = ml::data_checksum(comm, f.part, f.data);
  if (a.standardize) {
    f.standardized = true;
    f.scaling = ml::fit_standardization(comm, f.part, f.data);
    ml::apply_standardization(f.scaling, f.data);
  }
  return f;
}

/// The model file's record of the data: checksum, sample count, the standardisation if any.
void describe_fit_data(const FitData& f, ml::ModelFileContents& m) {
  m.string_attributes.emplace_back("data_checksum", f.checksum);
  m.int_attributes.emplace_back("samples", f.part.total_samples);
  if (f.standardized) {
    const auto d = static_cast<hsize_t>(f.data.features);
    m.arrays.push_back({"/standardize_mean", {d}, f.scaling.mean});
    m.arrays.push_back({"/standardize_std", {d}, f.scaling.std});
  }
}

int run_kmeans(const MlArgs& a, coll::Communicator& comm) {
  ml::SliceColumns columns;
  columns.labels_if_present = true;  // for the purity
  const FitData f = read_fit_data(a, comm, columns);
  const auto& part = f.part;
  const auto& data = f.data;
  ml::KMeansOptions o;
  o.k = a.k;
  o.max_iter = a.max_iter;
  o.tol = a.tol;
  o.stop = a.kmeans_stop == "inertia" ? ml::KMeansStop::inertia : ml::KMeansStop::shift;
  o.f32_products = a.products == "f32";
  o.bounds = !a.no_bounds;
  o.seed = a.seed;
  o.init = a.init == "random" ? ml::KMeansInit::random
           : a.init == "kmeans++" ? ml::KMeansInit::plusplus
                                  : ml::KMeansInit::parallel;
  o.init_rounds = a.init_rounds;
  o.oversampling = a.oversampling;
  const bool speak = comm.rank() == 0;
  MetricsFile metrics(a.metrics, speak);
  o.on_iteration = [&](std::int64_t it, double inertia) {
    metrics.write({{"type", "iteration"}, {"iteration", it}, {"inertia", inertia}});
    if (speak && it % 10 == 0) std::printf("kmeans: iteration %lld inertia %.17g\n", static_cast<long long>(it), inertia);
  };
  const auto start = std::chrono::steady_clock::now();
  const auto r = ml::fit_kmeans(comm, part, data, o);
  const double fit_s = seconds_since(start);
  const bool labelled = data.classes >= 2;  // the file's attribute: the same on every rank
  const double purity = labelled ? ml::kmeans_purity(comm, part, data, r) : -1.0;
  if (speak) {
    nlohmann::json summary{{"type", "summary"}, {"inertia", r.inertia}, {"iterations", r.iterations},
                           {"converged", r.converged}, {"fit_seconds", fit_s}};
    if (purity >= 0) summary["purity"] = purity;
    metrics.write(summary);
    ml::ModelFileContents m;
    m.model = "kmeans";
    m.arrays.push_back({"/centroids", {static_cast<hsize_t>(r.k), static_cast<hsize_t>(r.features)}, r.centroids});
    m.real_attributes = {{"inertia", r.inertia}, {"tol", a.tol}};
    m.string_attributes.emplace_back("stop", a.kmeans_stop);
    m.string_attributes.emplace_back("products", a.products);
    if (purity >= 0) m.real_attributes.emplace_back("purity", purity);
    m.int_attributes = {{"iterations", r.iterations}, {"k", r.k}, {"converged", r.converged ? 1 : 0},
                        {"seed", static_cast<std::int64_t>(a.seed)}};
    describe_fit_data(f, m);
    ml::write_model_file(a.out, m);
    std::printf("kmeans: %s after %lld iterations, inertia %.17g\n", r.converged ? "converged" : "stopped at --max-iter",
                static_cast<long long>(r.iterations), r.inertia);
    if (purity >= 0) std::printf("kmeans: purity %.4f against /labels\n", purity);
    std::printf("hpctrain: wrote %s: %lld centroids x %lld features\n", a.out.c_str(), static_cast<long long>(r.k),
                static_cast<long long>(r.features));
    std::fflush(stdout);
  }
  comm.barrier();
  return 0;
}

int run_linreg(const MlArgs& a, coll::Communicator& comm) {
  const FitData f = read_fit_data(a, comm, regression_columns(), /*as_f64=*/true);  // linreg reads row()
  const auto& part = f.part;
  const auto& data = f.data;
  const std::int64_t n = part.total_samples;
  MetricsFile metrics(a.metrics, comm.rank() == 0);
  const auto start = std::chrono::steady_clock::now();
  ml::LinearRegressionOptions o;
  o.l2 = a.l2;
  o.solver = a.solver == "lbfgs" ? ml::LinearSolver::lbfgs : ml::LinearSolver::normal;
  o.max_iter = a.max_iter;
  o.tol = a.linreg_tol;
  const auto r = ml::fit_linear_regression(comm, part, data, o);
  const double fit_s = seconds_since(start);
  if (comm.rank() == 0) {
    metrics.write({{"type", "summary"}, {"objective", 0.5 * r.mse + 0.5 * a.l2 * squared_norm(r.coefficients)},
                   {"mse", r.mse}, {"iterations", r.iterations}, {"fit_seconds", fit_s}});
    ml::ModelFileContents m;
    m.model = "linreg";
    m.arrays.push_back({"/coefficients", {static_cast<hsize_t>(r.coefficients.size())}, r.coefficients});
    m.arrays.push_back({"/intercept", {1}, {r.intercept}});
    m.real_attributes = {{"intercept", r.intercept}, {"l2", a.l2}, {"mse", r.mse}};
    m.string_attributes.emplace_back("solver", a.solver);
    m.int_attributes.emplace_back("iterations", r.iterations);
    describe_fit_data(f, m);
    ml::write_model_file(a.out, m);
    if (o.solver == ml::LinearSolver::lbfgs) {
      std::printf("linreg: lbfgs %s after %lld iterations\n", r.status.c_str(), static_cast<long long>(r.iterations));
    }
    std::printf("linreg: %lld samples, %zu features, intercept %.17g, training mse %.17g\n", static_cast<long long>(n),
                r.coefficients.size(), r.intercept, r.mse);
    std::printf("hpctrain: wrote %s\n", a.out.c_str());
    std::fflush(stdout);
  }
  comm.barrier();
  return 0;
}

int run_logreg(const MlArgs& a, coll::Communicator& comm) {
  const FitData f = read_fit_data(a, comm, classification_columns());
  const auto& part = f.part;
  const auto& data = f.data;
  const bool speak = comm.rank() == 0;
  MetricsFile metrics(a.metrics, speak);
  ml::LogisticRegressionOptions o;
  o.classes = data.classes;
  o.l2 = a.logreg_l2;
  o.max_iter = a.max_iter;
  o.tol = a.logreg_tol;
  o.f32_products = a.products == "f32";
  const auto start = std::chrono::steady_clock::now();
  o.on_iteration = [&](std::int64_t it, double objective, double gmax) {
    metrics.write({{"type", "iteration"},
                   {"iteration", it},
                   {"objective", objective},
                   {"gradient_max_abs", gmax},
                   {"seconds", seconds_since(start)}});
    if (speak && it % 10 == 0) {
      std::printf("logreg: iteration %lld objective %.17g max|g_i| %.3g\n", static_cast<long long>(it), objective,
                  gmax);
      std::fflush(stdout);
    }
  };
  const auto r = ml::fit_logistic_regression(comm, part, data, o);
  const double fit_s = seconds_since(start);
  const double train_accuracy = ml::logistic_accuracy(comm, r, data);
  double test_accuracy = -1.0;
  if (!a.eval_data.empty()) {
    auto test = ml::read_rank_slice(a.eval_data, comm.rank(), comm.size(), classification_columns()).data;
    if (f.standardized) ml::apply_standardization(f.scaling, test);  // the training set's scaling
    HPCTRAIN_REQUIRE(test.features == data.features && test.classes == data.classes,
                     "--eval-data '" + a.eval_data + "': its samples or classes differ from --data's");
    test_accuracy = ml::logistic_accuracy(comm, r, test);
  }
  if (speak) {
    ml::ModelFileContents m;
    m.model = "logreg";
    m.arrays.push_back({"/coefficients", {static_cast<hsize_t>(r.classes), static_cast<hsize_t>(r.features)},
                        r.coefficients});
    m.arrays.push_back({"/intercept", {static_cast<hsize_t>(r.classes)}, r.intercept});
    m.string_attributes.emplace_back("products", a.products);
    m.real_attributes = {{"objective", r.objective}, {"l2", a.logreg_l2}, {"tol", a.logreg_tol},
                         {"train_accuracy", train_accuracy}};
    if (test_accuracy >= 0) m.real_attributes.emplace_back("test_accuracy", test_accuracy);
    m.int_attributes = {{"iterations", r.iterations}, {"evaluations", r.evaluations}, {"classes", r.classes},
                        {"converged", r.converged ? 1 : 0}};
    describe_fit_data(f, m);
    ml::write_model_file(a.out, m);
    nlohmann::json summary{{"type", "summary"}, {"objective", r.objective}, {"iterations", r.iterations},
                           {"evaluations", r.evaluations}, {"converged", r.converged}, {"status", r.status},
                           {"train_accuracy", train_accuracy}, {"fit_seconds", fit_s}};
    if (test_accuracy >= 0) summary["test_accuracy"] = test_accuracy;
    metrics.write(summary);
    std::printf("logreg: %s after %lld iterations (%lld evaluations, %.2f s), objective %.17g\n", r.status.c_str(),
                static_cast<long long>(r.iterations), static_cast<long long>(r.evaluations), fit_s, r.objective);
    std::printf("logreg: train accuracy %.2f%%", 100.0 * train_accuracy);
    if (test_accuracy >= 0) std::printf(", test accuracy %.2f%%", 100.0 * test_accuracy);
    std::printf("\nhpctrain: wrote %s: %lld classes x %lld features\n", a.out.c_str(),
                static_cast<long long>(r.classes), static_cast<long long>(r.features));
    std::fflush(stdout);
  }
  comm.barrier();
  return 0;
}

int run_predict(const MlArgs& a, coll::Communicator& comm) {
  const ml::ModelFileContents model = ml::read_model_file(a.model);
  ml::RankSlice slice = ml::read_rank_slice(a.data, comm.rank(), comm.size(), {});
  const ml::Predictions p = ml::predict_slice(model, a.model, slice.data);
  ml::write_predictions(comm, p, a.out, {a.model, a.data});
  if (comm.rank() == 0) {
    std::printf("hpctrain: wrote %s: %lld %s predictions%s\n", a.out.c_str(), static_cast<long long>(slice.part.total_samples),
                model.model.c_str(), p.classes > 0 ? " and class probabilities" : "");
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

CLI::App* add_ml_commands(CLI::App& app, MlArgs& a) {
  CLI::App* ml = app.add_subcommand("ml", "Classical models fitted over all ranks, same result bits at any rank count");
  ml->require_subcommand(1);
  a.kmeans = ml->add_subcommand("kmeans", "k-means (Lloyd; k-means++ or random init); writes /centroids (K x d, f64)");
  a.kmeans->add_option("--data", a.data, "hpctrain HDF5 data set file or sharded directory (samples = stored value x scale)")->required();
  a.kmeans->add_option("--k", a.k, "Number of clusters (1..samples)")->required();
  a.kmeans->add_option("--max-iter", a.max_iter, "Most Lloyd iterations")->capture_default_str();
  a.kmeans->add_option("--tol", a.tol, "Tolerance of --stop")->capture_default_str();
  a.kmeans->add_option("--stop", a.kmeans_stop,
                       "Convergence test: shift (scikit-learn's: the squared centre shift of an iteration, summed "
                       "over centroids, <= tol x the mean feature variance) or inertia (|change| <= tol x inertia)")
      ->check(CLI::IsMember({"shift", "inertia"}))
      ->capture_default_str();
  a.kmeans->add_option("--products", a.products,
                       "Precision of the Lloyd assignments' dots x.c: f32 (the default: float gemm on oneDNN, "
                       "distances and sums in double) or f64")
      ->check(CLI::IsMember({"f64", "f32"}))
      ->capture_default_str();
  a.kmeans->add_flag("--no-bounds", a.no_bounds,
                     "Compute every sample's distances in every Lloyd iteration (with --stop shift the default "
                     "skips, by Hamerly's bounds, the samples whose centroid cannot change: the same model bytes)");
  a.kmeans->add_option("--seed", a.seed, "Seed of the counter-based RNG of the initialisation")->capture_default_str();
  a.kmeans->add_option("--init", a.init, "Initialisation")
      ->check(CLI::IsMember({"kmeans-parallel", "kmeans++", "random"}))
      ->capture_default_str();
  a.kmeans->add_option("--init-rounds", a.init_rounds, "kmeans-parallel: sampling rounds")->capture_default_str();
  a.kmeans->add_option("--oversampling", a.oversampling, "kmeans-parallel: expected candidates per round / k")
      ->capture_default_str();
  a.kmeans->add_option("--metrics", a.metrics, "JSONL: a record per iteration and a summary (rank 0)");
  a.kmeans->add_option("--out", a.out, "Model file (HDF5, written under a temporary name, then renamed)")->required();
  a.linreg = ml->add_subcommand("linreg", "Least squares with intercept, (1/2n)||y - Xw - b||^2 + (l2/2)||w||^2; "
                                          "writes /coefficients (d, f64) and the intercept");
  a.linreg->add_option("--data", a.data, "hpctrain HDF5 data set (file or sharded directory) with /targets (float64, N)")->required();
  a.linreg->add_option("--l2", a.l2, "Ridge penalty lambda (the intercept is not penalised)")->capture_default_str();
  a.linreg->add_option("--solver", a.solver, "normal: normal equations by Cholesky (d^2 sums); lbfgs: L-BFGS "
                                             "(d sums per pass; for wide data)")
      ->check(CLI::IsMember({"normal", "lbfgs"}))
      ->capture_default_str();
  a.linreg->add_option("--max-iter", a.max_iter, "lbfgs: most iterations")->capture_default_str();
  a.linreg->add_option("--tol", a.linreg_tol, "lbfgs: stop when ||gradient|| < tol * max(1, ||(w, b)||)")
      ->capture_default_str();
  a.linreg->add_option("--metrics", a.metrics, "JSONL: a summary record (objective, mse, fit_seconds; rank 0)");
  a.linreg->add_option("--out", a.out, "Model file (HDF5, written under a temporary name, then renamed)")->required();
  a.logreg = ml->add_subcommand("logreg", "Multinomial logistic regression by L-BFGS: mean cross-entropy + "
                                          "(l2/2)||W||^2 (intercept unpenalised); writes /coefficients "
                                          "(classes x d) and /intercept (classes)");
  a.logreg->add_option("--data", a.data, "hpctrain HDF5 data set (file or sharded directory) with /labels (classes from its `classes`)")
      ->required();
  a.logreg->add_option("--eval-data", a.eval_data, "Test split (file or sharded directory): its accuracy is printed and recorded");
  a.logreg->add_option("--l2", a.logreg_l2, "Penalty lambda on W (scikit-learn's C = 1/(n lambda))")
      ->capture_default_str();
  a.logreg->add_option("--max-iter", a.max_iter, "Most L-BFGS iterations")->capture_default_str();
  a.logreg->add_option("--tol", a.logreg_tol,
                       "Stop when max |gradient_i| <= tol (scikit-learn's rule and default for lbfgs)")
      ->capture_default_str();
  a.logreg->add_option("--products", a.products,
                       "Precision of the two dense products per pass: f32 (the default: about 1.6x faster, f and "
                       "gradient to ~1e-7 relative, sums in double) or f64")
      ->check(CLI::IsMember({"f64", "f32"}))
      ->capture_default_str();
  a.logreg->add_option("--metrics", a.metrics, "JSONL: a record per iteration and a summary (rank 0)");
  a.logreg->add_option("--out", a.out, "Model file (HDF5, written under a temporary name, then renamed)")->required();
  for (CLI::App* fit : {a.kmeans, a.linreg, a.logreg}) {
    fit->add_flag("--standardize", a.standardize,
                  "Scale every feature to mean 0, standard deviation 1 over all samples before the fit (the "
                  "model, in those units, stores the scaling; ml predict applies it)");
  }
  a.predict = ml->add_subcommand("predict", "Applies a model file of kmeans, linreg or logreg to a data set; writes "
                                            "/predictions (int32 class, or f64 for linreg) and, for logreg, "
                                            "/probabilities (N x classes, float32)");
  a.predict->add_option("--model", a.model, "Model file written by hpctrain ml kmeans|linreg|logreg")->required();
  a.predict->add_option("--data", a.data, "hpctrain HDF5 data set file or sharded directory (labels and targets are not needed)")->required();
  a.predict->add_option("--out", a.out, "Predictions file (HDF5, written under a temporary name, then renamed)")
      ->required();
  return ml;
}

int run_ml(const MlArgs& a, coll::Communicator& comm) {
  if (a.kmeans && *a.kmeans) return run_kmeans(a, comm);
  if (a.linreg && *a.linreg) return run_linreg(a, comm);
  if (a.logreg && *a.logreg) return run_logreg(a, comm);
  if (a.predict && *a.predict) return run_predict(a, comm);
  HPCTRAIN_FAIL("ml: no subcommand");
}

}  // namespace hpctrain::cli
