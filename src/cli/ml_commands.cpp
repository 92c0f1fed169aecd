#include "ml_commands.hpp"

#include <cstdio>

#include "hpctrain/collectives/error.hpp"
#include "hpctrain/ml/dataset_slice.hpp"
#include "hpctrain/ml/kmeans.hpp"
#include "hpctrain/ml/linear_regression.hpp"
#include "hpctrain/ml/model_file.hpp"

namespace hpctrain::cli {

namespace {

int run_kmeans(const MlArgs& a, coll::Communicator& comm) {
  const std::int64_t n = ml::dataset_sample_count(a.data);
  const auto part = ml::partition_samples(n, comm.rank(), comm.size());
  const auto data = ml::read_dataset_slice(a.data, part, false);
  ml::KMeansOptions o;
  o.k = a.k;
  o.max_iter = a.max_iter;
  o.tol = a.tol;
  o.seed = a.seed;
  o.init = a.init == "random" ? ml::KMeansInit::random : ml::KMeansInit::plusplus;
  const bool speak = comm.rank() == 0;
  o.on_iteration = [&](std::int64_t it, double inertia) {
    if (speak && it % 10 == 0) std::printf("kmeans: iteration %lld inertia %.17g\n", static_cast<long long>(it), inertia);
  };
  const auto r = ml::fit_kmeans(comm, part, data, o);
  if (speak) {
    ml::ModelFileContents m;
    m.model = "kmeans";
    m.arrays.push_back({"/centroids", {static_cast<hsize_t>(r.k), static_cast<hsize_t>(r.features)}, r.centroids});
    m.real_attributes = {{"inertia", r.inertia}, {"tol", a.tol}};
    m.int_attributes = {{"iterations", r.iterations}, {"k", r.k}, {"converged", r.converged ? 1 : 0},
                        {"seed", static_cast<std::int64_t>(a.seed)}};
    ml::write_model_file(a.out, m);
    std::printf("kmeans: %s after %lld iterations, inertia %.17g\n", r.converged ? "converged" : "stopped at --max-iter",
                static_cast<long long>(r.iterations), r.inertia);
    std::printf("hpctrain: wrote %s: %lld centroids x %lld features\n", a.out.c_str(), static_cast<long long>(r.k),
                static_cast<long long>(r.features));
    std::fflush(stdout);
  }
  comm.barrier();
  return 0;
}

int run_linreg(const MlArgs& a, coll::Communicator& comm) {
  const std::int64_t n = ml::dataset_sample_count(a.data);
  const auto part = ml::partition_samples(n, comm.rank(), comm.size());
  const auto data = ml::read_dataset_slice(a.data, part, true);
  const auto r = ml::fit_linear_regression(comm, part, data, ml::LinearRegressionOptions{a.l2});
  if (comm.rank() == 0) {
    ml::ModelFileContents m;
    m.model = "linreg";
    m.arrays.push_back({"/coefficients", {static_cast<hsize_t>(r.coefficients.size())}, r.coefficients});
    m.real_attributes = {{"intercept", r.intercept}, {"l2", a.l2}, {"mse", r.mse}};
    m.int_attributes = {{"samples", n}};
    ml::write_model_file(a.out, m);
    std::printf("linreg: %lld samples, %zu features, intercept %.17g, training mse %.17g\n", static_cast<long long>(n),
                r.coefficients.size(), r.intercept, r.mse);
    std::printf("hpctrain: wrote %s\n", a.out.c_str());
    std::fflush(stdout);
  }
  comm.barrier();
  return 0;
}

}  // namespace

CLI::App* add_ml_commands(CLI::App& app, MlArgs& a) {
  CLI::App* ml = app.add_subcommand("ml", "Classical models fitted over all ranks, same result bits at any rank count");
  ml->require_subcommand(1);
  a.kmeans = ml->add_subcommand("kmeans", "k-means (Lloyd; k-means++ or random init); writes /centroids (K x d, f64)");
  a.kmeans->add_option("--data", a.data, "hpctrain HDF5 data set (samples = stored value x scale)")->required();
  a.kmeans->add_option("--k", a.k, "Number of clusters (1..samples)")->required();
  a.kmeans->add_option("--max-iter", a.max_iter, "Most Lloyd iterations")->capture_default_str();
  a.kmeans->add_option("--tol", a.tol, "Stop when the inertia changes by at most tol x inertia")->capture_default_str();
  a.kmeans->add_option("--seed", a.seed, "Seed of the counter-based RNG of the initialisation")->capture_default_str();
  a.kmeans->add_option("--init", a.init, "Initialisation")
      ->check(CLI::IsMember({"kmeans++", "random"}))
      ->capture_default_str();
  a.kmeans->add_option("--out", a.out, "Model file (HDF5, written under a temporary name, then renamed)")->required();
  a.linreg = ml->add_subcommand("linreg", "Least squares with intercept, (1/2n)||y - Xw - b||^2 + (l2/2)||w||^2; "
                                          "writes /coefficients (d, f64) and the intercept");
  a.linreg->add_option("--data", a.data, "hpctrain HDF5 data set with /targets (float64, N)")->required();
  a.linreg->add_option("--l2", a.l2, "Ridge penalty lambda (the intercept is not penalised)")->capture_default_str();
  a.linreg->add_option("--out", a.out, "Model file (HDF5, written under a temporary name, then renamed)")->required();
  return ml;
}

int run_ml(const MlArgs& a, coll::Communicator& comm) {
  if (a.kmeans && *a.kmeans) return run_kmeans(a, comm);
  if (a.linreg && *a.linreg) return run_linreg(a, comm);
  HPCTRAIN_FAIL("ml: no subcommand");
}

}  // namespace hpctrain::cli
