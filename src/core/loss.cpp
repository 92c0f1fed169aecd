#include "hpctrain/core/loss.hpp"

#include "hpctrain/base/error.hpp"
#include "hpctrain/core/kokkos_compat.hpp"

#include <string>

namespace hpctrain::core {

namespace {

using Range = Kokkos::RangePolicy<ExecSpace>;

template <class T>
std::int64_t check_logits(const Tensor<T>& logits, const Labels& labels) {
  HPCTRAIN_REQUIRE(logits.rank() == 2, "logits must be [rows, classes], got " +
                                           shape_string(logits.shape));
  const std::int64_t rows = logits.dim(0), classes = logits.dim(1);
  HPCTRAIN_REQUIRE(static_cast<std::int64_t>(labels.extent(0)) == rows,
                   "softmax_cross_entropy: " + std::to_string(labels.extent(0)) +
                       " labels for " + std::to_string(rows) + " rows");
  const Labels l = labels;
  std::int64_t invalid = 0;
  Kokkos::parallel_reduce(
      "hpctrain::check_labels", Range(0, rows),
      KOKKOS_LAMBDA(const std::int64_t i, std::int64_t& bad) {
        bad += (l(i) < 0 || l(i) >= classes) ? 1 : 0;
      },
      invalid);
  HPCTRAIN_REQUIRE(invalid == 0, std::to_string(invalid) + " labels outside [0, " +
                                     std::to_string(classes) + ")");
  return classes;
}

}  // namespace

template <class T>
double softmax_cross_entropy(const Tensor<T>& logits, const Labels& labels,
                             std::int64_t global_batch, const Tensor<T>& dlogits) {
  const std::int64_t K = check_logits(logits, labels);
  const std::int64_t rows = logits.dim(0);
  HPCTRAIN_REQUIRE(global_batch >= rows && global_batch > 0,
                   "global batch " + std::to_string(global_batch) + " smaller than the " +
                       std::to_string(rows) + " local rows");
  HPCTRAIN_REQUIRE(dlogits.size() == logits.size(), "dlogits must have the logits' size");
  const Vec<T> z = logits.data;
  const Vec<T> dz = dlogits.data;
  const Labels l = labels;
  const double inv_batch = 1.0 / static_cast<double>(global_batch);
  double loss = 0.0;
  Kokkos::parallel_reduce(
      "hpctrain::softmax_cross_entropy", Range(0, rows),
      KOKKOS_LAMBDA(const std::int64_t i, double& sum) {
        const std::int64_t row = i * K;
        T m = z(row);
        for (std::int64_t k = 1; k < K; ++k) m = z(row + k) > m ? z(row + k) : m;
        double s = 0.0;
        for (std::int64_t k = 0; k < K; ++k) s += kmath::exp(static_cast<double>(z(row + k) - m));
        const double log_s = kmath::log(s);
        const std::int64_t y = l(i);
        sum += (log_s - static_cast<double>(z(row + y) - m)) * inv_batch;
        for (std::int64_t k = 0; k < K; ++k) {
          const double p = kmath::exp(static_cast<double>(z(row + k) - m) - log_s);
          dz(row + k) = static_cast<T>((p - (k == y ? 1.0 : 0.0)) * inv_batch);
        }
      },
      loss);
  return loss;
}

template <class T>
std::int64_t count_correct(const Tensor<T>& logits, const Labels& labels) {
  const std::int64_t K = check_logits(logits, labels);
  const Vec<T> z = logits.data;
  const Labels l = labels;
  std::int64_t correct = 0;
  Kokkos::parallel_reduce(
      "hpctrain::count_correct", Range(0, logits.dim(0)),
      KOKKOS_LAMBDA(const std::int64_t i, std::int64_t& sum) {
        std::int64_t best = 0;
        for (std::int64_t k = 1; k < K; ++k) best = z(i * K + k) > z(i * K + best) ? k : best;
        sum += best == l(i) ? 1 : 0;
      },
      correct);
  return correct;
}

template double softmax_cross_entropy<float>(const Tensor<float>&, const Labels&, std::int64_t,
                                             const Tensor<float>&);
template double softmax_cross_entropy<double>(const Tensor<double>&, const Labels&, std::int64_t,
                                              const Tensor<double>&);
template std::int64_t count_correct<float>(const Tensor<float>&, const Labels&);
template std::int64_t count_correct<double>(const Tensor<double>&, const Labels&);

}  // namespace hpctrain::core
