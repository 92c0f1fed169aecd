#pragma once
/// @file
/// Least squares with an intercept over all ranks, same result bits at any rank count.
///
/// Objective: (1/2n) ||y - X w - b||^2 + (l2/2) ||w||^2, the intercept b unpenalised
/// (scikit-learn's Ridge with alpha = n * l2). Normal equations on centred data:
///   (Xc^T Xc / n + l2 I) w = Xc^T yc / n,   b = mean(y) - mean(X) w,
/// with Xc = X - mean(X), yc = y - mean(y). Two passes over the local samples, each an exact
/// P-independent sum (exact_block_sum.hpp): first, per sum block, one dsyrk of [A 1]^T [A 1]
/// with A = [X y] - s, s the first sum block's mean (the column sums of A and A^T A's lower
/// triangle, (d + 1)(d + 4)/2 values; the column ranges in the same pass), centred after the
/// exact sum as A^T A - (1^T A)^T (1^T A) / n; then the residual (1 value). Rank 0 solves by
/// LAPACK's Cholesky (dpotrf/dpotrs) and broadcasts w and b. Cost: N d^2 γ / P + d^3 / 3 γ
/// (rank 0) + 2 α + 12 d^2 β.
/// Solver `lbfgs` (for wide data, where d^2 sums are too many): L-BFGS (libLBFGS, as logreg)
/// on the same objective from w = 0, b = 0; per evaluation one pass, per 64-row sub-block two
/// dgemv-shaped dgemm calls (X w, r^T X), the 1 + d + 1 sums [r^2, r x, r] added exactly, so
/// the result is the same at any P. Conditioning matters: use --standardize on features of
/// very different scales. Cost per evaluation: 4 N d γ / P + α + 24 (d + 2) β.
/// Rank deficiency (normal): with l2 = 0 a constant column (min == max over all samples) is an error
/// naming it; a column that is a linear combination of earlier ones makes the Cholesky fail at
/// that column, which the error names.

#include <cstdint>
#include <string>
#include <vector>

#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/ml/dataset_slice.hpp"
#include "hpctrain/ml/sample_partition.hpp"

namespace hpctrain::ml {

enum class LinearSolver { normal, lbfgs };

struct LinearRegressionOptions {
  double l2 = 0.0;  ///< λ of the objective (>= 0)
  LinearSolver solver = LinearSolver::normal;
  std::int64_t max_iter = 300;  ///< lbfgs
  double tol = 1e-8;            ///< lbfgs: ||g|| < tol * max(1, ||(w, b)||)
};

struct LinearRegressionResult {
  std::vector<double> coefficients;  ///< w, one per feature
  double intercept = 0.0;            ///< b
  double mse = 0.0;                  ///< (1/n) ||y - X w - b||^2 of the fitted model
  std::int64_t iterations = 0;       ///< lbfgs iterations (0 for normal)
  bool converged = true;             ///< lbfgs: stopped by the gradient-norm rule
  std::string status;                ///< lbfgs: which rule stopped it
};

/// Collective: fits the model to the samples (SliceStorage::f64: DatasetSlice::widen_all for a
/// uint8 file) and /targets of all ranks (`data` read with
/// read_targets). Throws hpctrain::Error for l2 < 0 and rank-deficient data (see above).
LinearRegressionResult fit_linear_regression(coll::Communicator& comm, const SamplePartition& part,
                                             const DatasetSlice& data, const LinearRegressionOptions& options);

}  // namespace hpctrain::ml
