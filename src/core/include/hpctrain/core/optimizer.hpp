#pragma once
/// @file
/// Optimisers acting on whole contiguous parameter/gradient buffers (one kernel per step), and
/// gradient clipping by global norm.

#include "hpctrain/core/tensor.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace hpctrain::core {

/// Updates parameters from gradients. State buffers are allocated on the first step with the
/// size of the buffers passed (a whole model, or one rank's shard of it).
template <class T>
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  /// One update of `params` from `grads` (same size, same size on every call).
  virtual void step(const Vec<T>& params, const Vec<T>& grads) = 0;
  virtual std::string name() const = 0;
  double learning_rate() const { return lr_; }
  void set_learning_rate(double lr) { lr_ = lr; }
  /// Steps taken so far (AdamW's bias correction uses it); restored from checkpoints.
  std::int64_t step_count() const { return steps_; }
  void set_step_count(std::int64_t steps) { steps_ = steps; }
  /// Named state buffers ("momentum", "exp_avg", ...), for checkpoints; empty before the
  /// first step unless allocate_state was called. Writing into them restores state.
  virtual std::vector<NamedTensor<T>> state() const = 0;
  /// Allocates zeroed state for `count` parameters (to load a checkpoint before a step).
  virtual void allocate_state(std::int64_t count) = 0;
  /// Elements where `mask` is 0 are left alone by step(): neither the parameter nor its state
  /// moves (batch norm's running statistics, kept in the parameter buffer, which weight decay
  /// and momentum must not touch). 1 elsewhere; the size of every step's buffers. Empty (the
  /// default): every element is updated. The updated elements get the same bits either way.
  void set_trainable_mask(const Vec<T>& mask) { trainable_ = mask; }

 protected:
  explicit Optimizer(double lr) : lr_(lr) {}
  double lr_;
  std::int64_t steps_ = 0;
  Vec<T> trainable_;
};

struct SgdOptions {
  double lr = 0.01;
  double momentum = 0.0;
  double weight_decay = 0.0;  ///< L2 term added to the gradient (PyTorch SGD semantics)
  bool nesterov = false;
};

/// PyTorch SGD: g' = g + wd p; v = mu v + g' (v = g' on the first step);
/// p -= lr (g' + mu v) with Nesterov, p -= lr v without; mu = 0 is plain SGD.
template <class T>
class Sgd final : public Optimizer<T> {
 public:
  explicit Sgd(const SgdOptions& options);
  void step(const Vec<T>& params, const Vec<T>& grads) override;
  std::string name() const override { return "sgd"; }
  std::vector<NamedTensor<T>> state() const override;
  void allocate_state(std::int64_t count) override;

 private:
  SgdOptions options_;
  Vec<T> momentum_;
};

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;  ///< decoupled: p -= lr wd p (Loshchilov & Hutter)
};

/// AdamW as in PyTorch: p -= lr wd p; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
/// p -= lr (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps).
template <class T>
class AdamW final : public Optimizer<T> {
 public:
  explicit AdamW(const AdamWOptions& options);
  void step(const Vec<T>& params, const Vec<T>& grads) override;
  std::string name() const override { return "adamw"; }
  std::vector<NamedTensor<T>> state() const override;
  void allocate_state(std::int64_t count) override;

 private:
  AdamWOptions options_;
  Vec<T> exp_avg_;
  Vec<T> exp_avg_sq_;
};

/// Sum of squares of all elements, accumulated in double.
template <class T>
double sum_of_squares(const Vec<T>& v);

/// Reduces a local sum of squares to the global one (e.g. an all-reduce over ranks).
using SumReduction = std::function<double(double)>;

/// Scales `grads` by max_norm / norm when the global norm exceeds max_norm, where
/// norm = sqrt(global_sum(local sum of squares)); an empty `global_sum` means this process
/// holds all gradients. Returns the norm before clipping.
template <class T>
double clip_grad_norm(const Vec<T>& grads, double max_norm, const SumReduction& global_sum = {});

/// Multiplies every element by `factor`.
template <class T>
void scale(const Vec<T>& v, T factor);

}  // namespace hpctrain::core
