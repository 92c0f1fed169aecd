// Least squares by the normal equations with exact sums; see linear_regression.hpp.
#include "hpctrain/ml/linear_regression.hpp"

#include <cmath>
#include <cstddef>
#include <limits>

#include <fmt/format.h>

#include "hpctrain/collectives/error.hpp"
#include "hpctrain/ml/exact_block_sum.hpp"

extern "C" {
// LAPACK (Fortran ABI; the trailing length is the hidden length of the character argument).
void dpotrf_(const char* uplo, const int* n, double* a, const int* lda, int* info, std::size_t uplo_len);
void dpotrs_(const char* uplo, const int* n, const int* nrhs, const double* a, const int* lda, double* b,
             const int* ldb, int* info, std::size_t uplo_len);
}

namespace hpctrain::ml {

namespace {

/// Collective: with l2 = 0 a column whose min equals its max is an error naming it.
void require_no_constant_column(coll::Communicator& comm, const DatasetSlice& data) {
  const auto d = static_cast<std::size_t>(data.features);
  std::vector<double> lo(d, std::numeric_limits<double>::infinity()), hi(d, -std::numeric_limits<double>::infinity());
  for (std::int64_t i = 0; i < data.rows; ++i) {
    for (std::size_t j = 0; j < d; ++j) {
      lo[j] = std::min(lo[j], data.row(i)[j]);
      hi[j] = std::max(hi[j], data.row(i)[j]);
    }
  }
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
  int info = 0, one = 1;
  dpotrf_("L", &d, c.data(), &d, &info, 1);
  HPCTRAIN_REQUIRE(info >= 0, fmt::format("linreg: dpotrf argument {} is invalid", -info));
  HPCTRAIN_REQUIRE(info == 0, fmt::format("linreg: data set '{}': the normal equations are singular at {}: it is "
                                          "(numerically) a linear combination of the columns before it; drop it "
                                          "or use --l2 > 0",
                                          data.path, data.column_name(info - 1)));
  dpotrs_("L", &d, &one, c.data(), &d, rhs.data(), &d, &info, 1);
  HPCTRAIN_REQUIRE(info == 0, fmt::format("linreg: dpotrs failed ({})", info));
  return rhs;
}

}  // namespace

LinearRegressionResult fit_linear_regression(coll::Communicator& comm, const SamplePartition& part,
                                             const DatasetSlice& data, const LinearRegressionOptions& o) {
  HPCTRAIN_REQUIRE(o.l2 >= 0.0 && std::isfinite(o.l2), fmt::format("linreg: --l2 must be >= 0, got {}", o.l2));
  HPCTRAIN_REQUIRE(static_cast<std::int64_t>(data.targets.size()) == data.rows, "linreg: the slice has no targets");
  const std::int64_t d = data.features;
  const auto n = static_cast<double>(part.total_samples);
  if (o.l2 == 0.0) require_no_constant_column(comm, data);

  // Pass 1: means of the features and the target.
  auto sums = exact_sum_over_samples(comm, part, static_cast<std::size_t>(d + 1), [&](std::int64_t first,
                                                                                   std::int64_t count, double* t) {
    for (std::int64_t i = first; i < first + count; ++i) {
      for (std::int64_t j = 0; j < d; ++j) t[j] += data.row(i)[j];
      t[d] += data.targets[static_cast<std::size_t>(i)];
    }
  });
  for (auto& v : sums) v /= n;
  const double y_mean = sums[static_cast<std::size_t>(d)];
  sums.pop_back();
  const std::vector<double>& x_mean = sums;

  // Pass 2: centred cross products Xc^T Xc (lower triangle computed, mirrored) and Xc^T yc.
  std::vector<double> xc(static_cast<std::size_t>(d));
  auto cross = exact_sum_over_samples(comm, part, static_cast<std::size_t>(d * d + d), [&](std::int64_t first,
                                                                                       std::int64_t count, double* t) {
    for (std::int64_t i = first; i < first + count; ++i) {
      for (std::int64_t j = 0; j < d; ++j) xc[static_cast<std::size_t>(j)] = data.row(i)[j] - x_mean[static_cast<std::size_t>(j)];
      const double yc = data.targets[static_cast<std::size_t>(i)] - y_mean;
      for (std::int64_t a = 0; a < d; ++a) {
        for (std::int64_t b = 0; b <= a; ++b) t[a * d + b] += xc[static_cast<std::size_t>(a)] * xc[static_cast<std::size_t>(b)];
        t[d * d + a] += xc[static_cast<std::size_t>(a)] * yc;
      }
    }
  });
  std::vector<double> rhs(cross.begin() + d * d, cross.end());
  cross.resize(static_cast<std::size_t>(d * d));
  for (std::int64_t a = 0; a < d; ++a) {
    for (std::int64_t b = a + 1; b < d; ++b) cross[static_cast<std::size_t>(a * d + b)] = cross[static_cast<std::size_t>(b * d + a)];
  }

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

  // Pass 3: the residual of the fitted model.
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
