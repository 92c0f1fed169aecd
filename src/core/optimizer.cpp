#include "hpctrain/core/optimizer.hpp"

#include "hpctrain/base/error.hpp"
#include "hpctrain/base/vector_clones.hpp"
#include "hpctrain/core/kokkos_compat.hpp"
#include "host_parallel.hpp"

#include <algorithm>
#include <cmath>
#include <type_traits>

namespace hpctrain::core {

namespace {

using Range = Kokkos::RangePolicy<ExecSpace>;

template <class T>
std::int64_t check_step_args(const Vec<T>& params, const Vec<T>& grads, const Vec<T>& state) {
  HPCTRAIN_REQUIRE(params.extent(0) == grads.extent(0),
                   "optimizer step: " + std::to_string(params.extent(0)) + " parameters but " +
                       std::to_string(grads.extent(0)) + " gradients");
  HPCTRAIN_REQUIRE(state.extent(0) == params.extent(0),
                   "optimizer step: state holds " + std::to_string(state.extent(0)) +
                       " elements, parameters " + std::to_string(params.extent(0)));
  return static_cast<std::int64_t>(params.extent(0));
}

/// body(i) for i in [0, n), skipping the elements where `trainable` is 0 when it is not empty
/// (Optimizer::set_trainable_mask).
template <class T, class Body>
void for_trainable(const char* name, std::int64_t n, const Vec<T>& trainable, const Body& body) {
  if (trainable.extent(0) == 0) {
    detail::host_parallel_for(name, n, body);
    return;
  }
  HPCTRAIN_REQUIRE(static_cast<std::int64_t>(trainable.extent(0)) == n,
                   "optimizer step: the trainable mask holds " + std::to_string(trainable.extent(0)) +
                       " elements, parameters " + std::to_string(n));
  const Vec<T> mask = trainable;
  detail::host_parallel_for(
      name, n, KOKKOS_LAMBDA(const std::int64_t i) {
        if (mask(i) != T(0)) body(i);
      });
}

/// The momentum step on [first, last), the lambda's IEEE operations in its order per element
/// (this file is compiled with -ffp-contract=off: no fused multiply-add in any clone).
template <class T>
HPCTRAIN_ALWAYS_INLINE inline void sgd_momentum_loop(T* __restrict params, const T* __restrict grads, T* __restrict v,
                                                     std::int64_t first, std::int64_t last, T lr, T wd, T mu,
                                                     bool first_step, bool nesterov) {
  if (first_step) {
    for (std::int64_t i = first; i < last; ++i) {
      const T g = grads[i] + wd * params[i];
      v[i] = g;
      params[i] -= lr * (nesterov ? g + mu * g : g);
    }
  } else if (nesterov) {
    for (std::int64_t i = first; i < last; ++i) {
      const T g = grads[i] + wd * params[i];
      const T vi = mu * v[i] + g;
      v[i] = vi;
      params[i] -= lr * (g + mu * vi);
    }
  } else {
    for (std::int64_t i = first; i < last; ++i) {
      const T g = grads[i] + wd * params[i];
      const T vi = mu * v[i] + g;
      v[i] = vi;
      params[i] -= lr * vi;
    }
  }
}

// The optimiser step is the MLP's largest pass outside gemm; compiled for the baseline x86-64
// alone it ran SSE2 code, four floats an instruction, and was bound by instructions, not memory
// (vector_clones.hpp: AVX-512 and AVX2 clones picked at load time, the same bits).
[[maybe_unused]] HPCTRAIN_VECTOR_CLONES void sgd_momentum_range(float* __restrict params, const float* __restrict grads,
                                               float* __restrict v, std::int64_t first, std::int64_t last, float lr,
                                               float wd, float mu, bool first_step, bool nesterov) {
  sgd_momentum_loop(params, grads, v, first, last, lr, wd, mu, first_step, nesterov);
}
[[maybe_unused]] HPCTRAIN_VECTOR_CLONES void sgd_momentum_range(double* __restrict params, const double* __restrict grads,
                                               double* __restrict v, std::int64_t first, std::int64_t last,
                                               double lr, double wd, double mu, bool first_step, bool nesterov) {
  sgd_momentum_loop(params, grads, v, first, last, lr, wd, mu, first_step, nesterov);
}

/// AdamW's step on [first, last), the lambda's IEEE operations in its order per element (no
/// contraction: see above; sqrt and division are correctly rounded in every clone).
template <class T>
HPCTRAIN_ALWAYS_INLINE inline void adamw_loop(T* __restrict params, const T* __restrict grads, T* __restrict m,
                                              T* __restrict v, std::int64_t first, std::int64_t last, T lr, T decay,
                                              T b1, T b2, T bias1, T sqrt_bias2, T eps) {
  for (std::int64_t i = first; i < last; ++i) {
    const T g = grads[i];
    const T mi = b1 * m[i] + (T(1) - b1) * g;
    const T vi = b2 * v[i] + (T(1) - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    params[i] = params[i] * decay - lr * (mi / bias1) / (std::sqrt(vi) / sqrt_bias2 + eps);
  }
}
[[maybe_unused]] HPCTRAIN_VECTOR_CLONES void adamw_range(float* __restrict params, const float* __restrict grads,
                                                         float* __restrict m, float* __restrict v, std::int64_t first,
                                                         std::int64_t last, float lr, float decay, float b1, float b2,
                                                         float bias1, float sqrt_bias2, float eps) {
  adamw_loop(params, grads, m, v, first, last, lr, decay, b1, b2, bias1, sqrt_bias2, eps);
}
[[maybe_unused]] HPCTRAIN_VECTOR_CLONES void adamw_range(double* __restrict params, const double* __restrict grads,
                                                         double* __restrict m, double* __restrict v, std::int64_t first,
                                                         std::int64_t last, double lr, double decay, double b1,
                                                         double b2, double bias1, double sqrt_bias2, double eps) {
  adamw_loop(params, grads, m, v, first, last, lr, decay, b1, b2, bias1, sqrt_bias2, eps);
}

/// Elements per call of a cloned range kernel on the OpenMP team.
constexpr std::int64_t kRangeChunk = std::int64_t{1} << 14;

/// Where host loops run on the OpenMP team and every parameter trains (no trainable mask):
/// range(first, last) over [0, n) in chunks of kRangeChunk there (a cloned range kernel), and
/// true; otherwise false, nothing run (the caller's element-wise kernel takes the step).
template <class T, class Range>
bool stepped_in_chunks(const char* name, std::int64_t n, const Vec<T>& trainable, const Range& range) {
  if constexpr (detail::host_loops_on_openmp()) {
    if (trainable.extent(0) != 0) return false;
    const std::int64_t chunks = (n + kRangeChunk - 1) / kRangeChunk;
    detail::host_parallel_for(
        name, chunks, [&](std::int64_t c) { range(c * kRangeChunk, std::min(n, (c + 1) * kRangeChunk)); }, kRangeChunk);
    return true;
  }
  return false;
}

}  // namespace

template <class T>
Sgd<T>::Sgd(const SgdOptions& options) : Optimizer<T>(options.lr), options_(options) {
  HPCTRAIN_REQUIRE(options.momentum >= 0.0 && options.weight_decay >= 0.0,
                   "sgd: momentum and weight decay must be non-negative");
  HPCTRAIN_REQUIRE(!options.nesterov || options.momentum > 0.0,
                   "sgd: Nesterov momentum needs momentum > 0");
}

template <class T>
void Sgd<T>::allocate_state(std::int64_t count) {
  if (options_.momentum > 0.0) momentum_ = Vec<T>("hpctrain::sgd::momentum", static_cast<std::size_t>(count));
}

template <class T>
std::vector<NamedTensor<T>> Sgd<T>::state() const {
  if (momentum_.extent(0) == 0) return {};
  return {{"momentum", Tensor<T>(momentum_, {static_cast<std::int64_t>(momentum_.extent(0))})}};
}

template <class T>
void Sgd<T>::step(const Vec<T>& params, const Vec<T>& grads) {
  const T lr = static_cast<T>(this->lr_);
  const T wd = static_cast<T>(options_.weight_decay);
  const T mu = static_cast<T>(options_.momentum);
  if (options_.momentum == 0.0) {
    const std::int64_t n = check_step_args(params, grads, params);
    for_trainable("hpctrain::sgd_step", n, this->trainable_,
                  KOKKOS_LAMBDA(const std::int64_t i) { params(i) -= lr * (grads(i) + wd * params(i)); });
  } else {
    if (momentum_.extent(0) == 0) allocate_state(static_cast<std::int64_t>(params.extent(0)));
    const std::int64_t n = check_step_args(params, grads, momentum_);
    const Vec<T> v = momentum_;
    const bool first = this->steps_ == 0;
    const bool nesterov = options_.nesterov;
    T* const p = params.data();
    const T* const g = grads.data();
    T* const vv = v.data();
    if (stepped_in_chunks("hpctrain::sgd_momentum_step", n, this->trainable_, [=](std::int64_t i0, std::int64_t i1) {
          sgd_momentum_range(p, g, vv, i0, i1, lr, wd, mu, first, nesterov);
        })) {
      ++this->steps_;
      return;
    }
    for_trainable(
        "hpctrain::sgd_momentum_step", n, this->trainable_, KOKKOS_LAMBDA(const std::int64_t i) {
          const T g = grads(i) + wd * params(i);
          const T vi = first ? g : mu * v(i) + g;
          v(i) = vi;
          params(i) -= lr * (nesterov ? g + mu * vi : vi);
        });
  }
  ++this->steps_;
}

template <class T>
AdamW<T>::AdamW(const AdamWOptions& options) : Optimizer<T>(options.lr), options_(options) {
  HPCTRAIN_REQUIRE(options.beta1 >= 0.0 && options.beta1 < 1.0 && options.beta2 >= 0.0 &&
                       options.beta2 < 1.0,
                   "adamw: betas must be in [0, 1)");
  HPCTRAIN_REQUIRE(options.eps > 0.0 && options.weight_decay >= 0.0,
                   "adamw: eps must be positive and weight decay non-negative");
}

template <class T>
void AdamW<T>::allocate_state(std::int64_t count) {
  exp_avg_ = Vec<T>("hpctrain::adamw::exp_avg", static_cast<std::size_t>(count));
  exp_avg_sq_ = Vec<T>("hpctrain::adamw::exp_avg_sq", static_cast<std::size_t>(count));
}

template <class T>
std::vector<NamedTensor<T>> AdamW<T>::state() const {
  if (exp_avg_.extent(0) == 0) return {};
  const Shape s{static_cast<std::int64_t>(exp_avg_.extent(0))};
  return {{"exp_avg", Tensor<T>(exp_avg_, s)}, {"exp_avg_sq", Tensor<T>(exp_avg_sq_, s)}};
}

template <class T>
void AdamW<T>::step(const Vec<T>& params, const Vec<T>& grads) {
  if (exp_avg_.extent(0) == 0) allocate_state(static_cast<std::int64_t>(params.extent(0)));
  const std::int64_t n = check_step_args(params, grads, exp_avg_);
  const auto t = static_cast<double>(this->steps_ + 1);
  const T lr = static_cast<T>(this->lr_);
  const T decay = static_cast<T>(1.0 - this->lr_ * options_.weight_decay);
  const T b1 = static_cast<T>(options_.beta1), b2 = static_cast<T>(options_.beta2);
  const T bias1 = static_cast<T>(1.0 - std::pow(options_.beta1, t));
  const T sqrt_bias2 = static_cast<T>(std::sqrt(1.0 - std::pow(options_.beta2, t)));
  const T eps = static_cast<T>(options_.eps);
  const Vec<T> m = exp_avg_, v = exp_avg_sq_;
  T* const p = params.data();
  const T* const g = grads.data();
  T* const mm = m.data();
  T* const vv = v.data();
  if (stepped_in_chunks("hpctrain::adamw_step", n, this->trainable_, [=](std::int64_t i0, std::int64_t i1) {
        adamw_range(p, g, mm, vv, i0, i1, lr, decay, b1, b2, bias1, sqrt_bias2, eps);
      })) {
    ++this->steps_;
    return;
  }
  for_trainable(
      "hpctrain::adamw_step", n, this->trainable_, KOKKOS_LAMBDA(const std::int64_t i) {
        const T g = grads(i);
        const T mi = b1 * m(i) + (T(1) - b1) * g;
        const T vi = b2 * v(i) + (T(1) - b2) * g * g;
        m(i) = mi;
        v(i) = vi;
        params(i) = params(i) * decay - lr * (mi / bias1) / (kmath::sqrt(vi) / sqrt_bias2 + eps);
      });
  ++this->steps_;
}

template <class T>
double sum_of_squares(const Vec<T>& v) {
  const Vec<T> x = v;
  double sum = 0.0;
  Kokkos::parallel_reduce(
      "hpctrain::sum_of_squares", Range(0, static_cast<std::int64_t>(v.extent(0))),
      KOKKOS_LAMBDA(const std::int64_t i, double& s) {
        const auto xi = static_cast<double>(x(i));
        s += xi * xi;
      },
      sum);
  return sum;
}

template <class T>
void scale(const Vec<T>& v, T factor) {
  const Vec<T> x = v;
  Kokkos::parallel_for(
      "hpctrain::scale", Range(0, static_cast<std::int64_t>(v.extent(0))),
      KOKKOS_LAMBDA(const std::int64_t i) { x(i) *= factor; });
}

template <class T>
double clip_grad_norm(const Vec<T>& grads, double max_norm, const SumReduction& global_sum) {
  HPCTRAIN_REQUIRE(max_norm > 0.0, "clip_grad_norm: max_norm must be positive");
  const double local = sum_of_squares(grads);
  const double norm = std::sqrt(global_sum ? global_sum(local) : local);
  // The small constant keeps the clipped norm just below max_norm (as PyTorch does) and the
  // factor finite when the norm is tiny.
  if (norm > max_norm) scale(grads, static_cast<T>(max_norm / (norm + 1e-6)));
  return norm;
}

#define HPCTRAIN_INSTANTIATE(T)                                                  \
  template class Sgd<T>;                                                         \
  template class AdamW<T>;                                                       \
  template double sum_of_squares<T>(const Vec<T>&);                              \
  template void scale<T>(const Vec<T>&, T);                                      \
  template double clip_grad_norm<T>(const Vec<T>&, double, const SumReduction&);

HPCTRAIN_INSTANTIATE(float)
HPCTRAIN_INSTANTIATE(double)

}  // namespace hpctrain::core
