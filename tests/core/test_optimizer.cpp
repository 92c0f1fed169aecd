// Optimiser steps against hand-written float64 updates; gradient clipping with a reduction hook.
#include "gradient_check.hpp"
#include "hpctrain/base/error.hpp"
#include "hpctrain/core/environment.hpp"
#include "hpctrain/core/optimizer.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

namespace hpctrain::core {
namespace {

using hpctrain::testing::random_values;

struct GradientSequence {
  std::vector<double> p0;
  std::vector<std::vector<double>> grads;  // one per step
};

GradientSequence make_run(std::size_t n, int steps) {
  GradientSequence r{random_values<double>(n, 71), {}};
  for (int s = 0; s < steps; ++s) r.grads.push_back(random_values<double>(n, 72 + s));
  return r;
}

/// Runs `opt` in float over the run; returns the final parameters.
std::vector<float> run_float(Optimizer<float>& opt, const GradientSequence& r) {
  const auto n = r.p0.size();
  auto p = tensor_from_host<float>("p", {static_cast<std::int64_t>(n)},
                                   std::vector<float>(r.p0.begin(), r.p0.end()));
  auto g = make_tensor<float>("g", {static_cast<std::int64_t>(n)});
  for (const auto& gs : r.grads) {
    from_host(g.data, std::vector<float>(gs.begin(), gs.end()));
    opt.step(p.data, g.data);
  }
  return to_host(p.data);
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  // float arithmetic on O(1) values over three steps: a few ulps of 1.
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 2e-6) << i;
}

std::vector<double> sgd_reference(const GradientSequence& r, double lr, double mu, double wd, bool nesterov) {
  std::vector<double> p = r.p0, v(p.size(), 0.0);
  for (std::size_t s = 0; s < r.grads.size(); ++s) {
    for (std::size_t i = 0; i < p.size(); ++i) {
      const double g = r.grads[s][i] + wd * p[i];
      v[i] = s == 0 ? g : mu * v[i] + g;
      p[i] -= lr * (mu == 0.0 ? g : (nesterov ? g + mu * v[i] : v[i]));
    }
  }
  return p;
}

TEST(Sgd, PlainMomentumNesterovAndWeightDecayMatchFloat64) {
  const GradientSequence r = make_run(37, 3);
  struct Case { double mu, wd; bool nesterov; };
  for (const Case c : {Case{0.0, 0.0, false}, Case{0.0, 0.1, false}, Case{0.9, 0.0, false},
                       Case{0.9, 0.01, true}}) {
    Sgd<float> opt(SgdOptions{0.1, c.mu, c.wd, c.nesterov});
    expect_close(run_float(opt, r), sgd_reference(r, 0.1, c.mu, c.wd, c.nesterov));
    EXPECT_EQ(opt.step_count(), 3);
    EXPECT_EQ(opt.state().size(), c.mu > 0 ? 1u : 0u);
  }
  EXPECT_THROW(Sgd<float>(SgdOptions{0.1, 0.0, 0.0, true}), Error);
}

TEST(AdamW, MatchesFloat64) {
  const GradientSequence r = make_run(29, 3);
  const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.1;
  AdamW<float> opt(AdamWOptions{lr, b1, b2, eps, wd});
  const auto got = run_float(opt, r);
  std::vector<double> p = r.p0, m(p.size(), 0.0), v(p.size(), 0.0);
  for (std::size_t s = 0; s < r.grads.size(); ++s) {
    const double t = static_cast<double>(s + 1);
    for (std::size_t i = 0; i < p.size(); ++i) {
      const double g = r.grads[s][i];
      p[i] -= lr * wd * p[i];
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      p[i] -= lr * (m[i] / (1 - std::pow(b1, t))) / (std::sqrt(v[i] / (1 - std::pow(b2, t))) + eps);
    }
  }
  expect_close(got, p);
  const auto state = opt.state();
  ASSERT_EQ(state.size(), 2u);
  EXPECT_EQ(state[0].name, "exp_avg");
  const auto hm = to_host(state[0].tensor.data);
  for (std::size_t i = 0; i < m.size(); ++i) EXPECT_NEAR(hm[i], m[i], 1e-6);
}

/// Long enough (> 2^15 elements) for the host build's optimiser loops to run on the OpenMP team
/// (src/core/host_parallel.hpp): the bits are the same with one thread and with three, with and
/// without a trainable mask, and still the float64 reference's to float accuracy.
TEST(Optimizer, StepsHaveTheSameBitsAtAnyThreadCount) {
  const GradientSequence r = make_run(100'003, 3);
  const auto n = static_cast<std::int64_t>(r.p0.size());
  std::vector<float> mask_host(r.p0.size(), 1.0f);
  for (std::size_t i = 0; i < mask_host.size(); i += 7) mask_host[i] = 0.0f;
  const auto mask = tensor_from_host<float>("mask", {n}, mask_host);
  const int before = std::max(1, blas_threads());
  const auto run = [&](int threads, int which, bool masked) {
    set_blas_threads(threads);  // OpenBLAS and the OpenMP team, as the Environment sets them
    std::unique_ptr<Optimizer<float>> opt;
    if (which == 0) opt = std::make_unique<Sgd<float>>(SgdOptions{0.1, 0.9, 0.01, true});
    if (which == 1) opt = std::make_unique<AdamW<float>>(AdamWOptions{0.01, 0.9, 0.999, 1e-8, 0.1});
    if (masked) opt->set_trainable_mask(mask.data);
    return run_float(*opt, r);
  };
  for (int which = 0; which < 2; ++which) {
    for (const bool masked : {false, true}) {
      const std::vector<float> one = run(1, which, masked), three = run(3, which, masked);
      EXPECT_EQ(one, three) << (which == 0 ? "sgd" : "adamw") << (masked ? " masked" : "");
      if (which == 0 && !masked) expect_close(three, sgd_reference(r, 0.1, 0.9, 0.01, true));
    }
  }
  set_blas_threads(before);
}

// Without a mask the SGD step runs a loop compiled for AVX-512, AVX2 and the baseline (picked at
// load time); with a mask of ones it runs the element-wise lambda. Both must give the same bits
// (no fused multiply-add in any clone), with and without Nesterov, first step included, on a
// length that leaves a partial vector and a partial chunk.
TEST(Sgd, VectorisedStepHasTheElementWiseLoopsBits) {
  const GradientSequence r = make_run(40'009, 3);
  const auto ones = tensor_from_host<float>("ones", {40'009}, std::vector<float>(40'009, 1.0f));
  for (const bool nesterov : {false, true}) {
    Sgd<float> plain(SgdOptions{0.1, 0.9, 0.01, nesterov}), masked(SgdOptions{0.1, 0.9, 0.01, nesterov});
    masked.set_trainable_mask(ones.data);
    const std::vector<float> a = run_float(plain, r), b = run_float(masked, r);
    ASSERT_EQ(a.size(), b.size());
    std::size_t differ = 0;
    for (std::size_t i = 0; i < a.size(); ++i) differ += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
    EXPECT_EQ(differ, 0u) << (nesterov ? "nesterov" : "momentum");
    expect_close(a, sgd_reference(r, 0.1, 0.9, 0.01, nesterov));
  }
}

// The same for AdamW (its square root and divisions in the AVX-512/AVX2 clones): bit for bit
// the element-wise loop's, and near float64 (the reference of MatchesFloat64).
TEST(AdamW, VectorisedStepHasTheElementWiseLoopsBits) {
  const GradientSequence r = make_run(40'009, 3);
  const auto ones = tensor_from_host<float>("ones", {40'009}, std::vector<float>(40'009, 1.0f));
  const AdamWOptions o{0.01, 0.9, 0.999, 1e-8, 0.1};
  AdamW<float> plain(o), masked(o);
  masked.set_trainable_mask(ones.data);
  const std::vector<float> a = run_float(plain, r), b = run_float(masked, r);
  ASSERT_EQ(a.size(), b.size());
  std::size_t differ = 0;
  for (std::size_t i = 0; i < a.size(); ++i) differ += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  EXPECT_EQ(differ, 0u);
  for (std::size_t k = 0; k < 2; ++k) {
    const auto sa = to_host(plain.state()[k].tensor.data), sb = to_host(masked.state()[k].tensor.data);
    EXPECT_EQ(std::memcmp(sa.data(), sb.data(), sa.size() * sizeof(float)), 0) << plain.state()[k].name;
  }
  std::vector<double> p = r.p0, m(p.size(), 0.0), v(p.size(), 0.0);
  for (std::size_t s = 0; s < r.grads.size(); ++s) {
    const double t = static_cast<double>(s + 1);
    for (std::size_t i = 0; i < p.size(); ++i) {
      const double g = r.grads[s][i];
      p[i] -= o.lr * o.weight_decay * p[i];
      m[i] = o.beta1 * m[i] + (1 - o.beta1) * g;
      v[i] = o.beta2 * v[i] + (1 - o.beta2) * g * g;
      p[i] -= o.lr * (m[i] / (1 - std::pow(o.beta1, t))) / (std::sqrt(v[i] / (1 - std::pow(o.beta2, t))) + o.eps);
    }
  }
  expect_close(a, p);
}

TEST(AdamW, RestoredStateContinuesIdentically) {
  const GradientSequence r = make_run(16, 4);
  AdamW<float> a(AdamWOptions{});
  const auto full = run_float(a, r);
  // Two steps, save state and parameters, continue in a fresh optimiser.
  AdamW<float> first(AdamWOptions{});
  GradientSequence head{r.p0, {r.grads[0], r.grads[1]}};
  const auto mid = run_float(first, head);
  AdamW<float> second(AdamWOptions{});
  second.allocate_state(16);
  second.set_step_count(first.step_count());
  for (std::size_t i = 0; i < 2; ++i) {
    Kokkos::deep_copy(second.state()[i].tensor.data, first.state()[i].tensor.data);
  }
  GradientSequence tail{std::vector<double>(mid.begin(), mid.end()), {r.grads[2], r.grads[3]}};
  EXPECT_EQ(run_float(second, tail), full);
}

/// Elements masked 0 keep their parameter and their optimiser state (zero here: never moved
/// from allocation); the others get the bits of the unmasked step. Weight decay on, so an
/// ignored mask would move every masked element.
void expect_mask_freezes(Optimizer<float>& masked, Optimizer<float>& plain) {
  const GradientSequence r = make_run(37, 3);
  std::vector<float> mask(37, 1.0f);
  for (std::size_t i : {0u, 5u, 6u, 7u, 36u}) mask[i] = 0.0f;
  masked.set_trainable_mask(tensor_from_host<float>("mask", {37}, mask).data);
  const std::vector<float> got = run_float(masked, r), want = run_float(plain, r);
  for (std::size_t i = 0; i < mask.size(); ++i) {
    if (mask[i] == 0.0f) {
      EXPECT_EQ(got[i], static_cast<float>(r.p0[i])) << "masked element " << i << " moved";
      for (const auto& s : masked.state()) EXPECT_EQ(to_host(s.tensor.data)[i], 0.0f) << s.name << " " << i;
    } else {
      EXPECT_EQ(got[i], want[i]) << "trainable element " << i;
    }
  }
}

TEST(Optimizer, TrainableMaskLeavesMaskedElementsAndTheirStateAlone) {
  const SgdOptions so{0.1, 0.9, 0.01, false};
  Sgd<float> sgd_masked(so), sgd_plain(so);
  expect_mask_freezes(sgd_masked, sgd_plain);
  const SgdOptions plain_sgd{0.1, 0.0, 0.01, false};
  Sgd<float> plain_masked(plain_sgd), plain_plain(plain_sgd);
  expect_mask_freezes(plain_masked, plain_plain);
  AdamWOptions ao;
  ao.weight_decay = 0.1;
  AdamW<float> adam_masked(ao), adam_plain(ao);
  expect_mask_freezes(adam_masked, adam_plain);
}

TEST(Optimizer, TrainableMaskOfTheWrongSizeIsAnError) {
  Sgd<float> sgd(SgdOptions{0.1, 0.9, 0.0, false});
  sgd.set_trainable_mask(make_tensor<float>("mask", {3}).data);
  auto p = make_tensor<float>("p", {4});
  auto g = make_tensor<float>("g", {4});
  EXPECT_THROW(sgd.step(p.data, g.data), Error);
}

TEST(ClipGradNorm, ScalesOnlyAboveTheGlobalNorm) {
  auto g = tensor_from_host<double>("g", {2}, {3.0, 4.0});  // local norm 5
  EXPECT_DOUBLE_EQ(clip_grad_norm(g.data, 10.0), 5.0);
  EXPECT_EQ(to_host(g.data), (std::vector<double>{3.0, 4.0}));
  EXPECT_DOUBLE_EQ(clip_grad_norm(g.data, 1.0), 5.0);
  const auto h = to_host(g.data);
  EXPECT_NEAR(std::hypot(h[0], h[1]), 1.0, 1e-6);
  EXPECT_NEAR(h[0] / h[1], 0.75, 1e-12);
}

TEST(ClipGradNorm, UsesTheReductionHookForTheGlobalNorm) {
  auto g = tensor_from_host<double>("g", {2}, {3.0, 4.0});
  double seen = 0.0;
  // As if four ranks each held these gradients: global norm 10.
  const double norm = clip_grad_norm(g.data, 5.0, [&](double local) {
    seen = local;
    return 4.0 * local;
  });
  EXPECT_DOUBLE_EQ(seen, 25.0);
  EXPECT_DOUBLE_EQ(norm, 10.0);
  const auto h = to_host(g.data);
  EXPECT_NEAR(h[0], 1.5, 1e-6);  // scaled by 5 / 10, not by 5 / 5
  EXPECT_NEAR(h[1], 2.0, 1e-6);
}

}  // namespace
}  // namespace hpctrain::core
