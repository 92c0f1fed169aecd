#pragma once
/// @file
/// Least squares with an intercept over all ranks, same result bits at any rank count.
///
/// Objective: (1/2n) ||y - X w - b||^2 + (l2/2) ||w||^2, the intercept b unpenalised
/// (scikit-learn's Ridge with alpha = n * l2). Normal equations on centred data:
///   (Xc^T Xc / n + l2 I) w = Xc^T yc / n,   b = mean(y) - mean(X) w,
/// with Xc = X - mean(X), yc = y - mean(y). Three passes over the local samples, each an exact
/// P-independent sum (exact_block_sum.hpp): the means (d + 1 values), the centred cross
/// products (d^2 + d values), the residual (1 value). Rank 0 solves by LAPACK's Cholesky
/// (dpotrf/dpotrs) and broadcasts w and b. Cost: 3 N d^2 γ / P + d^3 / 3 γ (rank 0) +
/// α + 24 (d^2 + d) β.
/// Rank deficiency: with l2 = 0 a constant column (min == max over all samples) is an error
/// naming it; a column that is a linear combination of earlier ones makes the Cholesky fail at
/// that column, which the error names.

#include <cstdint>
#include <vector>

#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/ml/dataset_slice.hpp"
#include "hpctrain/ml/sample_partition.hpp"

namespace hpctrain::ml {

struct LinearRegressionOptions {
  double l2 = 0.0;  ///< λ of the objective (>= 0)
};

struct LinearRegressionResult {
  std::vector<double> coefficients;  ///< w, one per feature
  double intercept = 0.0;            ///< b
  double mse = 0.0;                  ///< (1/n) ||y - X w - b||^2 of the fitted model
};

/// Collective: fits the model to the samples and /targets of all ranks (`data` read with
/// read_targets). Throws hpctrain::Error for l2 < 0 and rank-deficient data (see above).
LinearRegressionResult fit_linear_regression(coll::Communicator& comm, const SamplePartition& part,
                                             const DatasetSlice& data, const LinearRegressionOptions& options);

}  // namespace hpctrain::ml
