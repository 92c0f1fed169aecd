// Least squares by the normal equations with exact sums; see linear_regression.hpp.
#include "hpctrain/ml/linear_regression.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

#include <fmt/format.h>

#include "hpctrain/base/error.hpp"
#include "hpctrain/base/vector_clones.hpp"
#include "hpctrain/ml/exact_block_sum.hpp"
#include "blas_products.hpp"
#include "lbfgs_minimizer.hpp"

extern "C" {
// LAPACK (Fortran ABI; the trailing length is the hidden length of the character argument).
void dpotrf_(const char* uplo, const int* n, double* a, const int* lda, int* info, std::size_t uplo_len);
void dpotrs_(const char* uplo, const int* n, const int* nrhs, const double* a, const int* lda, double* b,
             const int* ldb, int* info, std::size_t uplo_len);
}

namespace hpctrain::ml {

namespace {

/// Collective: with l2 = 0 a column whose min equals its max is an error naming it; `lo` and
/// `hi` are this rank's column minima and maxima (reduced here).
void require_no_constant_column(coll::Communicator& comm, const DatasetSlice& data, std::vector<double> lo,
                                std::vector<double> hi) {
  const auto d = static_cast<std::size_t>(data.features);
  comm.allreduce(lo.data(), d, coll::ReduceOp::min);
  comm.allreduce(hi.data(), d, coll::ReduceOp::max);
  for (std::size_t j = 0; j < d; ++j) {
    HPCTRAIN_REQUIRE(lo[j] != hi[j], fmt::format("linreg: data set '{}': {} is constant ({}), so the normal "
                                                 "equations are singular; drop it or use --l2 > 0",
                                                 data.path, data.column_name(static_cast<std::int64_t>(j)), lo[j]));
  }
}

/// Rank 0: solves (C / n + l2 I) w = c / n by Cholesky; C is d x d (both triangles filled).
std::vector<double> solve_normal_equations(std::vector<double> c, std::vector<double> rhs, double n, double l2,
                                           const DatasetSlice& data) {
  const int d = static_cast<int>(data.features);
  for (auto& v : c) v /= n;
  for (auto& v : rhs) v /= n;
  for (int j = 0; j < d; ++j) c[static_cast<std::size_t>(j * d + j)] += l2;
  std::vector<double> diagonal(static_cast<std::size_t>(d));
  for (int j = 0; j < d; ++j) diagonal[static_cast<std::size_t>(j)] = c[static_cast<std::size_t>(j * d + j)];
  int info = 0, one = 1;
  dpotrf_("L", &d, c.data(), &d, &info, 1);
  HPCTRAIN_REQUIRE(info >= 0, fmt::format("linreg: dpotrf argument {} is invalid", -info));
  // L_jj^2 / C_jj is the share of column j's (centred) variance left after projecting out the
  // columns before it, 1 - R^2: below kDependentShare the column is numerically a linear
  // combination of them (the sums are rounded, so exact dependence need not make dpotrf fail).
  constexpr double kDependentShare = 1e-10;
  for (int j = 0; info == 0 && l2 == 0.0 && j < d; ++j) {
    const double l = c[static_cast<std::size_t>(j * d + j)];
    if (l * l < kDependentShare * diagonal[static_cast<std::size_t>(j)]) info = j + 1;
  }
  HPCTRAIN_REQUIRE(info == 0, fmt::format("linreg: data set '{}': the normal equations are singular at {}: it is "
                                          "(numerically) a linear combination of the columns before it; drop it "
                                          "or use --l2 > 0",
                                          data.path, data.column_name(info - 1)));
  dpotrs_("L", &d, &one, c.data(), &d, rhs.data(), &d, &info, 1);
  HPCTRAIN_REQUIRE(info == 0, fmt::format("linreg: dpotrs failed ({})", info));
  return rhs;
}

/// The means of [X y] and the centred cross products Xc^T Xc (d x d, both triangles) and Xc^T yc (d).
struct CentredSums {
  std::vector<double> x_mean, cross, rhs;
  double y_mean = 0.0;
};

/// Collective: the mean of [X y] over the first sum block (global samples [0, kSumBlockSamples)),
/// summed in order on its owner (rank 0, or a later one where P > B leaves rank 0 without
/// blocks) and broadcast from there: a shift near the data that depends on the data alone.
std::vector<double> first_block_mean(coll::Communicator& comm, const SamplePartition& part, const DatasetSlice& data) {
  const std::int64_t d = data.features, e = d + 1;
  std::vector<double> shift(static_cast<std::size_t>(e), 0.0);
  if (part.first_block == 0 && part.block_count > 0) {
    const std::int64_t rows = part.block_length(0);
    for (std::int64_t i = 0; i < rows; ++i) {
      for (std::int64_t j = 0; j < d; ++j) shift[static_cast<std::size_t>(j)] += data.row(i)[j];
      shift[static_cast<std::size_t>(d)] += data.targets[static_cast<std::size_t>(i)];
    }
    for (auto& v : shift) v /= static_cast<double>(rows);
  }
  const int owner = SamplePartition::owner_of(part.total_samples, 0, comm.size());
  comm.broadcast(shift.data(), shift.size(), coll::DataType::f64, owner);
  return shift;
}

/// Samples [first, first + count) (one sum block) of [X - s_x, y - s_y, 1] into `a` (count x
/// (d + 2), row-major: the column of ones makes a^T a hold the column sums); their column ranges
/// folded into `lo` and `hi` (d each). Element-wise IEEE operations: the same bits in any clone.
HPCTRAIN_VECTOR_CLONES void shifted_rows(const DatasetSlice& data, std::int64_t first, std::int64_t count,
                                         const double* __restrict shift, double* __restrict a,
                                         double* __restrict lo, double* __restrict hi) {
  const std::int64_t d = data.features, w = d + 2;
  for (std::int64_t i = 0; i < count; ++i) {
    const double* __restrict x = data.row(first + i);
    double* __restrict ai = a + i * w;
    for (std::int64_t j = 0; j < d; ++j) {
      lo[j] = std::min(lo[j], x[j]);
      hi[j] = std::max(hi[j], x[j]);
      ai[j] = x[j] - shift[j];
    }
    ai[d] = data.targets[static_cast<std::size_t>(first + i)] - shift[d];
    ai[d + 1] = 1.0;
  }
}

/// Collective, one pass over the samples: with A = [X y] - s, s = first_block_mean, the exact
/// sums of A's columns (S, e = d + 1 values) and of A^T A's lower triangle (Q, by one dsyrk per
/// sum block: the same call at any P), then the centred sums Q - S S^T / n, which do not depend
/// on s (a shift near the data keeps the cancellation small). With `check_constant` a column
/// whose min equals its max is an error.
CentredSums centred_sums(coll::Communicator& comm, const SamplePartition& part, const DatasetSlice& data,
                         bool check_constant) {
  const std::int64_t d = data.features, e = d + 1, tri = e * (e + 1) / 2;
  const auto shift = first_block_mean(comm, part, data);
  std::vector<double> a(static_cast<std::size_t>(kSumBlockSamples * (e + 1)));
  std::vector<double> q(static_cast<std::size_t>((e + 1) * (e + 1)));
  std::vector<double> lo(static_cast<std::size_t>(d), std::numeric_limits<double>::infinity());
  std::vector<double> hi(static_cast<std::size_t>(d), -std::numeric_limits<double>::infinity());
  const auto width = static_cast<std::size_t>(e + tri);
  const auto sums = exact_sum_over_samples(comm, part, width, [&](std::int64_t first, std::int64_t count, double* t) {
    shifted_rows(data, first, count, shift.data(), a.data(), lo.data(), hi.data());
    detail::transpose_times_self(a.data(), count, e + 1, q.data());  // [A 1]^T [A 1] (lower triangle)
    for (std::int64_t c = 0; c < e; ++c) t[c] = q[static_cast<std::size_t>(e * (e + 1) + c)];  // 1^T A
    double* packed = t + e;
    for (std::int64_t r = 0; r < e; ++r) {
      for (std::int64_t c = 0; c <= r; ++c) *packed++ = q[static_cast<std::size_t>(r * (e + 1) + c)];
    }
  });
  if (check_constant) require_no_constant_column(comm, data, std::move(lo), std::move(hi));
  const double n = static_cast<double>(part.total_samples);
  const auto centred = [&](std::int64_t r, std::int64_t c) {  // r >= c
    const double* s = sums.data();
    return sums[static_cast<std::size_t>(e + r * (r + 1) / 2 + c)] - s[r] * (s[c] / n);
  };
  CentredSums m;
  m.cross.resize(static_cast<std::size_t>(d * d));
  m.rhs.resize(static_cast<std::size_t>(d));
  m.x_mean.resize(static_cast<std::size_t>(d));
  for (std::int64_t r = 0; r < d; ++r) {
    for (std::int64_t c = 0; c < d; ++c) {
      m.cross[static_cast<std::size_t>(r * d + c)] = centred(std::max(r, c), std::min(r, c));
    }
    m.rhs[static_cast<std::size_t>(r)] = centred(d, r);
    m.x_mean[static_cast<std::size_t>(r)] = shift[static_cast<std::size_t>(r)] + sums[static_cast<std::size_t>(r)] / n;
  }
  m.y_mean = shift[static_cast<std::size_t>(d)] + sums[static_cast<std::size_t>(d)] / n;
  return m;
}

/// One evaluation of the objective and its gradient for the lbfgs solver (see the header).
double least_squares_objective(coll::Communicator& comm, const SamplePartition& part, const DatasetSlice& data,
                               double l2, const double* x, double* g) {
  const std::int64_t d = data.features;
  const double b = x[d];
  std::vector<double> pred(static_cast<std::size_t>(detail::kSubBlockRows));
  const auto sums = exact_sum_over_samples(comm, part, static_cast<std::size_t>(d + 2), [&](std::int64_t first,
                                                                                          std::int64_t count, double* t) {
    for (std::int64_t sub = first; sub < first + count; sub += detail::kSubBlockRows) {
      const std::int64_t rows = std::min(detail::kSubBlockRows, first + count - sub);
      detail::rows_times_transpose(data.row(sub), rows, d, x, 1, pred.data());  // X w
      for (std::int64_t i = 0; i < rows; ++i) {
        const double r = data.targets[static_cast<std::size_t>(sub + i)] - pred[static_cast<std::size_t>(i)] - b;
        pred[static_cast<std::size_t>(i)] = r;
        t[0] += r * r;
        t[d + 1] += r;
      }
      detail::add_transpose_times_rows(pred.data(), rows, 1, data.row(sub), d, t + 1);  // += r^T X
    }
  });
  const double inv_n = 1.0 / static_cast<double>(part.total_samples);
  double penalty = 0.0;
  for (std::int64_t j = 0; j < d; ++j) {
    penalty += x[j] * x[j];
    g[j] = -sums[static_cast<std::size_t>(1 + j)] * inv_n + l2 * x[j];
  }
  g[d] = -sums[static_cast<std::size_t>(d + 1)] * inv_n;
  return 0.5 * sums[0] * inv_n + 0.5 * l2 * penalty;
}

LinearRegressionResult fit_by_lbfgs(coll::Communicator& comm, const SamplePartition& part, const DatasetSlice& data,
                                    const LinearRegressionOptions& o) {
  HPCTRAIN_REQUIRE(o.tol > 0.0 && std::isfinite(o.tol), fmt::format("linreg: --tol must be > 0, got {}", o.tol));
  HPCTRAIN_REQUIRE(o.max_iter >= 1, fmt::format("linreg: --max-iter must be at least 1, got {}", o.max_iter));
  const std::int64_t d = data.features;
  detail::LbfgsOptions lo;
  lo.max_iter = o.max_iter;
  lo.tol = o.tol;
  const auto m = detail::minimize_lbfgs(
      d + 1, [&](const double* x, double* g) { return least_squares_objective(comm, part, data, o.l2, x, g); }, lo,
      "linreg");
  LinearRegressionResult r;
  r.coefficients.assign(m.x.begin(), m.x.begin() + d);
  r.intercept = m.x[static_cast<std::size_t>(d)];
  double penalty = 0.0;
  for (double w : r.coefficients) penalty += w * w;
  r.mse = 2.0 * (m.objective - 0.5 * o.l2 * penalty);
  r.iterations = m.iterations;
  r.converged = m.converged;
  r.status = m.status;
  return r;
}

}  // namespace

LinearRegressionResult fit_linear_regression(coll::Communicator& comm, const SamplePartition& part,
                                             const DatasetSlice& data, const LinearRegressionOptions& o) {
  HPCTRAIN_REQUIRE(o.l2 >= 0.0 && std::isfinite(o.l2), fmt::format("linreg: --l2 must be >= 0, got {}", o.l2));
  HPCTRAIN_REQUIRE(static_cast<std::int64_t>(data.targets.size()) == data.rows, "linreg: the slice has no targets");
  HPCTRAIN_REQUIRE(data.storage == SliceStorage::f64,
                   fmt::format("linreg: data set '{}': the samples must be f64 rows (DatasetSlice::widen_all)", data.path));
  const detail::SingleBlasThread one_blas_thread;
  if (o.solver == LinearSolver::lbfgs) return fit_by_lbfgs(comm, part, data, o);
  const std::int64_t d = data.features;
  const auto n = static_cast<double>(part.total_samples);
  // One pass: the column sums and cross products of [X y] - shift, and the column ranges.
  CentredSums m = centred_sums(comm, part, data, o.l2 == 0.0);
  const std::vector<double>& x_mean = m.x_mean;
  const double y_mean = m.y_mean;
  std::vector<double> cross = std::move(m.cross), rhs = std::move(m.rhs);

  LinearRegressionResult r;
  r.coefficients.assign(static_cast<std::size_t>(d + 1), 0.0);  // w, then b
  int failed = 0;
  std::string why;
  if (comm.rank() == 0) {
    try {
      const auto w = solve_normal_equations(std::move(cross), std::move(rhs), n, o.l2, data);
      double b = y_mean;
      for (std::int64_t j = 0; j < d; ++j) b -= x_mean[static_cast<std::size_t>(j)] * w[static_cast<std::size_t>(j)];
      std::copy(w.begin(), w.end(), r.coefficients.begin());
      r.coefficients.back() = b;
    } catch (const Error& e) {
      failed = 1;
      why = e.reason();
    }
  }
  comm.allreduce(&failed, 1, coll::ReduceOp::max);  // rank 0 decides, all agree
  HPCTRAIN_REQUIRE(!failed, comm.rank() == 0 ? why : std::string("linreg: the solve failed on rank 0"));
  comm.broadcast(r.coefficients.data(), r.coefficients.size(), coll::DataType::f64, 0);
  r.intercept = r.coefficients.back();
  r.coefficients.pop_back();

  // Second pass: the residual of the fitted model.
  const auto res = exact_sum_over_samples(comm, part, 1, [&](std::int64_t first, std::int64_t count, double* t) {
    for (std::int64_t i = first; i < first + count; ++i) {
      double e = data.targets[static_cast<std::size_t>(i)] - r.intercept;
      for (std::int64_t j = 0; j < d; ++j) e -= data.row(i)[j] * r.coefficients[static_cast<std::size_t>(j)];
      t[0] += e * e;
    }
  });
  r.mse = res[0] / n;
  return r;
}

}  // namespace hpctrain::ml
