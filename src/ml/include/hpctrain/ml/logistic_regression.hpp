#pragma once
/// @file
/// Multinomial logistic regression over all ranks, same result bits at any rank count.
///
/// Objective, for n samples x_i with labels y_i in 0..C-1, weights W (C x d) and intercepts b (C):
///
///     f(W, b) = (1/n) sum_i -log softmax(W x_i + b)_{y_i}  +  (l2/2) ||W||_F^2
///
/// The intercept b is not penalised. This is scikit-learn's multinomial LogisticRegression with
/// C = 1 / (n * l2), divided by C * n (the same minimiser).
///
/// Minimised by L-BFGS (libLBFGS, Debian's liblbfgs: its two-loop recursion and More-Thuente line
/// search). Every evaluation of f and its gradient is one pass over the local samples, sum block
/// by sum block (sample_partition.hpp): per block the logits Z = X_b W^T and the gradient
/// (P - Y)^T X_b are two dgemm calls (OpenBLAS, one thread, so a block's term has the same bits
/// wherever it is computed), then the 1 + C (d + 1) sums of all blocks are added exactly
/// (exact_block_sum.hpp). Every rank therefore sees the same f and gradient bits and takes the
/// same L-BFGS path: the model has the same bytes at P = 1, 2, 3, ...
/// Cost per evaluation: 4 N C d γ / P (the two gemms) + α + 24 (C (d + 1) + 1) β.
///
/// Stopping rule: max_i |g_i| <= tol over the gradient of f in (W, b), tested after each
/// iteration — scikit-learn's rule for its lbfgs solver (SciPy L-BFGS-B's `pgtol`, the projected
/// gradient, which without bounds is the gradient), so both sides stop at the same tolerance on
/// the same objective — or max_iter iterations. A line search that can make no further progress
/// at the precision of f (libLBFGS's rounding-error and minimum-step codes) also stops the fit;
/// `status` says which rule stopped it.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/ml/dataset_slice.hpp"
#include "hpctrain/ml/sample_partition.hpp"

namespace hpctrain::ml {

struct LogisticRegressionOptions {
  std::int64_t classes = 0;   ///< C (>= 2): labels are 0..C-1
  double l2 = 1e-4;           ///< λ of the objective (>= 0)
  std::int64_t max_iter = 300;
  double tol = 1e-4;          ///< stop when max |g_i| <= tol (> 0; scikit-learn's default)
  int history = 10;           ///< L-BFGS correction pairs kept
  /// The two products (logits, gradient) in single precision: sgemm on each sub-block's rows
  /// widened to float (DatasetSlice::widen_rows), each sub-block's gradient product (64 samples)
  /// added to the double term at once; softmax, loss and every sum stay double (the block sums
  /// exact). About twice the speed; f and its gradient carry ~1e-7 relative error, so L-BFGS may
  /// end by its line search (rounding) before the gradient rule. Still the same bits at any P.
  bool f32_products = false;
  /// Called on every rank after each L-BFGS iteration with (iteration, objective, max |g_i|).
  std::function<void(std::int64_t, double, double)> on_iteration;
};

struct LogisticRegressionResult {
  std::int64_t classes = 0, features = 0;
  std::vector<double> coefficients;  ///< W, classes x features, row-major
  std::vector<double> intercept;     ///< b, classes
  double objective = 0.0;            ///< f at the returned (W, b)
  std::int64_t iterations = 0;       ///< L-BFGS iterations
  std::int64_t evaluations = 0;      ///< passes over the data (f and gradient)
  bool converged = false;            ///< stopped by the gradient rule (max |g_i| <= tol)
  std::string status;                ///< which rule stopped the fit, in words
};

/// Collective: fits the model to the samples and labels of all ranks (`data` read with
/// read_labels). Throws hpctrain::Error for classes < 2, a label outside 0..C-1, l2 < 0,
/// tol <= 0 or max_iter < 1.
LogisticRegressionResult fit_logistic_regression(coll::Communicator& comm, const SamplePartition& part,
                                                 const DatasetSlice& data, const LogisticRegressionOptions& options);

/// Class probabilities (rows x C, row-major) of `rows` samples (row-major, d values each).
std::vector<double> logistic_probabilities(const LogisticRegressionResult& model, const double* samples,
                                           std::int64_t rows);

/// Collective: the fraction of all samples of `data` whose most probable class (ties to the
/// lowest index) is their label; exact counts, so the same at any P.
double logistic_accuracy(coll::Communicator& comm, const LogisticRegressionResult& model, const DatasetSlice& data);

}  // namespace hpctrain::ml
