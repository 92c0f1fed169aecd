// Multinomial logistic regression by L-BFGS with exact, P-independent sums; see
// logistic_regression.hpp.
#include "hpctrain/ml/logistic_regression.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "hpctrain/base/error.hpp"
#include "hpctrain/ml/exact_block_sum.hpp"
#include "blas_products.hpp"
#include "lbfgs_minimizer.hpp"

namespace hpctrain::ml {

namespace {

/// Z (rows x C, row-major) = X W^T + b for `rows` row-major samples X and W (C x d, row-major).
void logits(const double* w, const double* b, std::int64_t classes, std::int64_t d, const double* x,
            std::int64_t rows, double* z) {
  detail::rows_times_transpose(x, rows, d, w, classes, z);
  for (std::int64_t i = 0; i < rows; ++i) {
    for (std::int64_t c = 0; c < classes; ++c) z[i * classes + c] += b[c];
  }
}

/// Row i of z (C logits) becomes its softmax; returns log(sum exp(z_i)) (stable: max shifted).
double softmax_in_place(double* zi, std::int64_t classes) {
  const double top = *std::max_element(zi, zi + classes);
  double sum = 0.0;
  for (std::int64_t c = 0; c < classes; ++c) {
    zi[c] = std::exp(zi[c] - top);
    sum += zi[c];
  }
  for (std::int64_t c = 0; c < classes; ++c) zi[c] /= sum;
  return top + std::log(sum);
}

/// One evaluation's inputs; the evaluation is collective (every rank sees the same bits).
struct Problem {
  coll::Communicator* comm;
  const SamplePartition* part;
  const DatasetSlice* data;
  const LogisticRegressionOptions* options;
  std::int64_t classes, features;
  std::vector<double> z;  // one sub-block's logits, reused
  std::vector<double> x;  // one sub-block's rows widened to f64 (a uint8 slice), reused
  // Single-precision products (options.f32_products): one sub-block's rows, W, logits, G and one
  // block's gradient in float; everything else stays double.
  std::vector<float> x32, w32, z32, grad32;
};

/// Softmax, loss and G = P - Y of one sub-block's logits z (rows x C, bias not yet added),
/// in double; adds the losses and G's column sums to `term`.
void loss_and_residual(Problem& pb, const double* b, std::int64_t sub, std::int64_t rows, double* term) {
  const std::int64_t c = pb.classes;
  double* grad_b = term + 1 + c * pb.features;
  for (std::int64_t i = 0; i < rows; ++i) {
    double* zi = pb.z.data() + i * c;
    for (std::int64_t k = 0; k < c; ++k) zi[k] += b[k];
    const std::int32_t y = pb.data->labels[static_cast<std::size_t>(sub + i)];
    const double zy = zi[y];
    term[0] += softmax_in_place(zi, c) - zy;  // -log softmax(z)_y = log sum exp(z) - z_y
    zi[y] -= 1.0;
    for (std::int64_t k = 0; k < c; ++k) grad_b[k] += zi[k];
  }
}

/// block_term with single-precision products: per sub-block sgemm logits, then the sub-block's
/// gradient G^T X (64 samples) in float, added to the double term at once (a float sum over a
/// whole block left L-BFGS 1e-4 above the optimum at 300 iterations on Fashion-MNIST).
void block_term_f32(Problem& pb, const double* b, std::int64_t first, std::int64_t count, double* term) {
  const std::int64_t c = pb.classes, d = pb.features;
  pb.z.resize(static_cast<std::size_t>(detail::kSubBlockRows * c));
  pb.z32.resize(pb.z.size());
  pb.grad32.resize(static_cast<std::size_t>(c * d));
  pb.x32.resize(static_cast<std::size_t>(detail::kSubBlockRows * d));
  for (std::int64_t sub = first; sub < first + count; sub += detail::kSubBlockRows) {
    const std::int64_t rows = std::min(detail::kSubBlockRows, first + count - sub);
    pb.data->widen_rows(sub, rows, pb.x32.data());  // both products read it from cache
    const float* x = pb.x32.data();
    detail::rows_times_transpose(x, rows, d, pb.w32.data(), c, pb.z32.data());
    std::copy(pb.z32.begin(), pb.z32.begin() + rows * c, pb.z.begin());
    loss_and_residual(pb, b, sub, rows, term);
    std::copy(pb.z.begin(), pb.z.begin() + rows * c, pb.z32.begin());
    detail::transpose_times_rows(pb.z32.data(), rows, c, x, d, pb.grad32.data());  // G^T X
    for (std::int64_t i = 0; i < c * d; ++i) term[1 + i] += pb.grad32[static_cast<std::size_t>(i)];
  }
}

/// term = [sum of losses, sum of (p - e_y) x^T (C x d), sum of (p - e_y) (C)] over one block,
/// sub-block by sub-block in order.
void block_term(Problem& pb, const double* w, const double* b, std::int64_t first, std::int64_t count,
                double* term) {
  if (pb.options->f32_products) return block_term_f32(pb, b, first, count, term);
  const std::int64_t c = pb.classes, d = pb.features;
  pb.z.resize(static_cast<std::size_t>(detail::kSubBlockRows * c));
  // Both products read each sub-block's rows while they are in cache.
  for_each_f64_block(*pb.data, first, count, detail::kSubBlockRows, pb.x, [&](const double* x, std::int64_t sub,
                                                                             std::int64_t rows) {
    detail::rows_times_transpose(x, rows, d, w, c, pb.z.data());
    loss_and_residual(pb, b, sub, rows, term);
    detail::add_transpose_times_rows(pb.z.data(), rows, c, x, d, term + 1);  // += G^T X
  });
}

/// f(W, b) and its gradient (file comment), from the exact sums of all blocks' terms.
double objective_and_gradient(Problem& pb, const double* x, double* g) {
  const std::int64_t c = pb.classes, d = pb.features;
  const double* w = x;
  const double* b = x + c * d;
  const auto width = static_cast<std::size_t>(1 + c * (d + 1));
  if (pb.options->f32_products) pb.w32.assign(w, w + c * d);
  const std::vector<double> sum = exact_sum_over_samples(
      *pb.comm, *pb.part, width,
      [&](std::int64_t first, std::int64_t count, double* term) { block_term(pb, w, b, first, count, term); });
  const double inv_n = 1.0 / static_cast<double>(pb.part->total_samples);
  const double l2 = pb.options->l2;
  double penalty = 0.0;
  for (std::int64_t i = 0; i < c * d; ++i) {
    penalty += w[i] * w[i];
    g[i] = sum[static_cast<std::size_t>(1 + i)] * inv_n + l2 * w[i];
  }
  for (std::int64_t k = 0; k < c; ++k) g[c * d + k] = sum[static_cast<std::size_t>(1 + c * d + k)] * inv_n;
  return sum[0] * inv_n + 0.5 * l2 * penalty;
}

void check_options(const DatasetSlice& data, const LogisticRegressionOptions& o) {
  HPCTRAIN_REQUIRE(o.classes >= 2, fmt::format("logreg: --classes must be at least 2 (got {})", o.classes));
  HPCTRAIN_REQUIRE(o.l2 >= 0 && std::isfinite(o.l2), fmt::format("logreg: --l2 must be >= 0 (got {})", o.l2));
  HPCTRAIN_REQUIRE(o.tol > 0 && std::isfinite(o.tol), fmt::format("logreg: --tol must be > 0 (got {})", o.tol));
  HPCTRAIN_REQUIRE(o.max_iter >= 1, fmt::format("logreg: --max-iter must be at least 1 (got {})", o.max_iter));
  HPCTRAIN_REQUIRE(static_cast<std::int64_t>(data.labels.size()) == data.rows,
                   fmt::format("logreg: data set '{}': labels were not read", data.path));
  for (std::size_t i = 0; i < data.labels.size(); ++i) {
    HPCTRAIN_REQUIRE(data.labels[i] >= 0 && data.labels[i] < o.classes,
                     fmt::format("logreg: data set '{}': label of sample {} is {}, outside [0, {})", data.path,
                                 data.first + static_cast<std::int64_t>(i), data.labels[i], o.classes));
  }
}

}  // namespace

LogisticRegressionResult fit_logistic_regression(coll::Communicator& comm, const SamplePartition& part,
                                                 const DatasetSlice& data, const LogisticRegressionOptions& options) {
  check_options(data, options);
  const detail::SingleBlasThread one_blas_thread;
  Problem pb{&comm, &part, &data, &options, options.classes, data.features, {}, {}, {}, {}, {}, {}};
  detail::LbfgsOptions lo;
  lo.max_iter = options.max_iter;
  lo.tol = options.tol;
  lo.stop = detail::LbfgsStop::max_abs;
  lo.history = options.history;
  lo.on_iteration = options.on_iteration;
  const detail::LbfgsResult m = detail::minimize_lbfgs(
      pb.classes * (pb.features + 1), [&](const double* x, double* g) { return objective_and_gradient(pb, x, g); },
      lo, "logreg");
  LogisticRegressionResult r;
  r.classes = pb.classes;
  r.features = pb.features;
  r.coefficients.assign(m.x.begin(), m.x.begin() + pb.classes * pb.features);
  r.intercept.assign(m.x.begin() + pb.classes * pb.features, m.x.end());
  r.objective = m.objective;
  r.iterations = m.iterations;
  r.evaluations = m.evaluations;
  r.converged = m.converged;
  r.status = m.status;
  return r;
}

std::vector<double> logistic_probabilities(const LogisticRegressionResult& model, const double* samples,
                                           std::int64_t rows) {
  std::vector<double> p(static_cast<std::size_t>(rows * model.classes));
  if (rows == 0) return p;
  logits(model.coefficients.data(), model.intercept.data(), model.classes, model.features, samples, rows, p.data());
  for (std::int64_t i = 0; i < rows; ++i) softmax_in_place(p.data() + i * model.classes, model.classes);
  return p;
}

double logistic_accuracy(coll::Communicator& comm, const LogisticRegressionResult& model, const DatasetSlice& data) {
  std::int64_t counts[2] = {0, data.rows};
  std::vector<double> widened;
  for_each_f64_block(data, 0, data.rows, kWidenBlockRows, widened, [&](const double* x, std::int64_t at, std::int64_t rows) {
    const std::vector<double> p = logistic_probabilities(model, x, rows);
    for (std::int64_t i = 0; i < rows; ++i) {
      const double* pi = p.data() + i * model.classes;
      const auto best = std::max_element(pi, pi + model.classes) - pi;  // first maximum
      if (best == data.labels[static_cast<std::size_t>(at + i)]) ++counts[0];
    }
  });
  comm.allreduce(counts, 2, coll::ReduceOp::sum);
  return counts[1] == 0 ? 0.0 : static_cast<double>(counts[0]) / static_cast<double>(counts[1]);
}

}  // namespace hpctrain::ml
