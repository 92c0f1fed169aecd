// bench_kernels: the compute core's kernels and whole training steps, single process.
//
//   build/bin/bench_kernels [--kokkos-threads=N] [Google Benchmark flags, e.g.
//                            --benchmark_filter=gemm --benchmark_format=json]
//
// Three groups, each timed by wall clock (OpenMP/CUDA work is not on the main thread's CPU
// clock), every timed region ending with a fence:
//
//  gemm/<model>.<layer>.<pass>/MxNxK   hpctrain::core::gemm (libxsmm's kernels by default, the
//      rest oneDNN's matmul; HPCTRAIN_GEMM_BACKEND=onednn|blas: oneDNN only, or KokkosBlas::gemm ->
//      OpenBLAS or cuBLAS) at the shapes the MLP and CNN train with at batch 128 (mlp16.*: the
//      MLP at deterministic mode's 16-row micro-shards), and OpenBLAS's cblas_sgemm called
//      directly on host copies of the same matrices, alternating within each iteration so both
//      see the same machine. Counters: GFLOPs (ours, 2 M N K per call), cblas_GFLOPs, vs_cblas =
//      GFLOPs / cblas_GFLOPs; on the libxsmm backend also onednn_GFLOPs and vs_onednn (oneDNN's
//      matmul on the same matrices in the same iteration). The benchmark's time is ours.
//  gemm_leaf_tree/mlp.<layer>.dW/MxNxK/leaf:16   deterministic training's weight gradient over
//      a node of micro-shards (core::gemm_tn_leaf_tree: each 16-row leaf's product, added over the
//      tree sum's tree) against the plain product over all K rows on the same matrices in the
//      same iteration. Counters: GFLOPs, plain_GFLOPs, frac_of_plain = plain time / tree time.
//  bound/cblas_sgemm_1thread/1024      OpenBLAS sgemm 1024^3 on one thread: the per-core peak
//      the other figures can be read against (OpenBLAS's own thread count is restored after).
//  conv/<layer>/<fwd|fwd+bwd|fwd+bwd-no-dx>/<backend>  the CNN's two convolutions at batch 64
//      on each backend (portable: im2col + gemm, col2im; onednn: oneDNN's direct kernels,
//      reorders included), forward alone and forward + backward (weight, bias and input
//      gradients); for conv1, the CNN's first layer, also forward + the backward the model runs
//      there (fwd+bwd-no-dx: weight and bias gradients; the model needs no input gradient).
//      FLOPs: 2 N Cout Hout Wout Cin K K per pass; forward = 1 pass, backward = 2 (dW, dX) or 1
//      without dX; the bare gemms run the same passes.
//      Counters: GFLOPs, gemm_GFLOPs (the same gemms run bare on the same buffers, in the same
//      iteration), frac_of_gemm = GFLOPs / gemm_GFLOPs (what im2col/col2im/layout cost).
//  stream/<kernel>                    the memory-bound kernels (ReLU, 2x2 max-pool, softmax
//      cross-entropy, SGD with momentum) at the CNN's sizes, each against a copy of the same
//      bytes timed in the same iteration. Counters: GB_per_s (bytes read + written once),
//      copy_GB_per_s, frac_of_copy = copy time / kernel time.
//  train_step/<mlp|cnn>/<batch>        zero grads, forward, softmax cross-entropy, backward,
//      SGD (momentum 0.9) on a model from models::build_model. Counter: samples_per_s.
//  train_step_micro_shards/<mlp|cnn>/batch:B/shard:S/one_buffer:0|1  deterministic mode's
//      compute without its collectives: the batch in micro-shards of S rows, each into its own
//      gradient buffer, summed pairwise, then SGD; against the whole batch in one pass in the
//      same iteration. one_buffer:1 adds every micro-shard into one buffer instead (the 16-row
//      passes' own cost, below any arrangement of the sum). grouped:1 runs the batch as one pass
//      with the micro-shards as leaf rows (Sequential::set_gradient_leaves; the MLP only), as
//      deterministic training's grouped passes do. Counters: samples_per_s,
//      whole_batch_samples_per_s, frac_of_whole_batch.
//
// Kokkos is initialised in main (it takes --kokkos-* flags); no MPI.

#include "hpctrain/core/conv.hpp"
#include "hpctrain/core/elementwise.hpp"
#include "hpctrain/core/gemm.hpp"
#include "hpctrain/core/loss.hpp"
#include "hpctrain/core/optimizer.hpp"
#include "hpctrain/core/tensor.hpp"
#include "hpctrain/models/registry.hpp"

#include <Kokkos_Core.hpp>

#include "hpctrain/core/environment.hpp"
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <cstdio>
#include <cstdint>
#include <exception>
#include <random>
#include <string>
#include <vector>

#ifdef HPCTRAIN_BENCH_OPENBLAS
extern "C" {
// OpenBLAS extensions; declared here because not every cblas.h alternative declares them.
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);
char* openblas_get_config(void);
char* openblas_get_corename(void);
}
#endif

namespace {

namespace core = hpctrain::core;
namespace models = hpctrain::models;
using core::Trans;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void fence() { core::ExecSpace().fence(); }

std::vector<float> random_host(std::int64_t n, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0F, 1.0F);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = dist(gen);
  return v;
}

core::Vec<float> random_vec(const std::string& label, std::int64_t n, std::uint32_t seed) {
  return core::tensor_from_host<float>(label, {n}, random_host(n, seed)).data;
}

// ---- gemm ----------------------------------------------------------------------------------

struct GemmShape {
  std::string name;  ///< "<model>.<layer>.<pass>"
  Trans ta;
  Trans tb;
  std::int64_t m, n, k;
  float beta;  ///< 1 where the model accumulates (weight gradients)
};

// Dense layer y[N,out] = x[N,in] W^T: forward (N, T) M=N N=out K=in; weight gradient
// dW[out,in] += dy^T x: (T, N) M=out N=in K=N; input gradient dx = dy W: (N, N) M=N N=in K=out.
// Conv layer (im2col, NP = N Ho Wo, CKK = C K K): forward W[F,CKK] col: (N, N) M=F N=NP K=CKK;
// dW += dyt col^T: (N, T) M=F N=CKK K=NP; dcol = W^T dyt: (T, N) M=CKK N=NP K=F.
// The first layer of each model computes no input gradient in training, so none is listed.
std::vector<GemmShape> training_gemm_shapes() {
  std::int64_t b = 128;
  std::vector<GemmShape> s;
  auto dense = [&](const std::string& name, std::int64_t in, std::int64_t out, bool first) {
    s.push_back({name + ".fwd", Trans::no, Trans::yes, b, out, in, 0.0F});
    s.push_back({name + ".dW", Trans::yes, Trans::no, out, in, b, 1.0F});
    if (!first) s.push_back({name + ".dX", Trans::no, Trans::no, b, in, out, 0.0F});
  };
  auto conv = [&](const std::string& name, std::int64_t c, std::int64_t hw, std::int64_t f,
                  std::int64_t k, bool first) {
    const std::int64_t np = b * hw * hw, ckk = c * k * k;
    s.push_back({name + ".fwd", Trans::no, Trans::no, f, np, ckk, 0.0F});
    s.push_back({name + ".dW", Trans::no, Trans::yes, f, ckk, np, 1.0F});
    if (!first) s.push_back({name + ".dX", Trans::yes, Trans::no, ckk, np, f, 0.0F});
  };
  dense("mlp.fc1", 784, 512, true);
  dense("mlp.fc2", 512, 256, false);
  dense("mlp.fc3", 256, 10, false);
  conv("cnn.conv1", 1, 28, 32, 5, true);
  conv("cnn.conv2", 32, 14, 64, 5, false);
  dense("cnn.fc1", 64 * 7 * 7, 256, false);
  dense("cnn.fc2", 256, 10, false);
  // the MLP at deterministic mode's default micro-shard of 16 rows
  b = 16;
  dense("mlp16.fc1", 784, 512, true);
  dense("mlp16.fc2", 512, 256, false);
  dense("mlp16.fc3", 256, 10, false);
  s.push_back({"square", Trans::no, Trans::no, 1024, 1024, 1024, 0.0F});
  return s;
}

CBLAS_TRANSPOSE cblas_trans(Trans t) { return t == Trans::yes ? CblasTrans : CblasNoTrans; }

void bench_gemm(benchmark::State& state, const GemmShape& g) {
  try {
    const std::int64_t a_rows = g.ta == Trans::yes ? g.k : g.m;
    const std::int64_t a_cols = g.ta == Trans::yes ? g.m : g.k;
    const std::int64_t b_rows = g.tb == Trans::yes ? g.n : g.k;
    const std::int64_t b_cols = g.tb == Trans::yes ? g.k : g.n;
    const auto ha = random_host(a_rows * a_cols, 1);
    const auto hb = random_host(b_rows * b_cols, 2);
    std::vector<float> hc(static_cast<std::size_t>(g.m * g.n), 0.0F);
    const auto a = core::tensor_from_host<float>("bench::a", {a_rows * a_cols}, ha).data;
    const auto b = core::tensor_from_host<float>("bench::b", {b_rows * b_cols}, hb).data;
    const auto c = core::make_tensor<float>("bench::c", {g.m * g.n}).data;
    const auto am = core::as_matrix(a, a_rows, a_cols);
    const auto bm = core::as_matrix(b, b_rows, b_cols);
    const auto cm = core::as_matrix(c, g.m, g.n);
    // Warm-up: OpenBLAS starts its threads and pages in its buffers on the first call.
    core::gemm(g.ta, g.tb, 1.0F, am, bm, g.beta, cm);
    cblas_sgemm(CblasRowMajor, cblas_trans(g.ta), cblas_trans(g.tb), g.m, g.n, g.k, 1.0F,
                ha.data(), a_cols, hb.data(), b_cols, g.beta, hc.data(), g.n);
    fence();
    // With libxsmm the default, oneDNN's matmul on the same matrices in the same iteration too.
    const core::GemmBackend ours_backend = core::gemm_backend();
    const bool vs_onednn = ours_backend == core::GemmBackend::libxsmm && core::onednn_available();
    double ours_s = 0, cblas_s = 0, onednn_s = 0;
    for (auto _ : state) {
      auto t0 = Clock::now();
      core::gemm(g.ta, g.tb, 1.0F, am, bm, g.beta, cm);
      fence();
      const double ours = seconds_since(t0);
      t0 = Clock::now();
      cblas_sgemm(CblasRowMajor, cblas_trans(g.ta), cblas_trans(g.tb), g.m, g.n, g.k, 1.0F,
                  ha.data(), a_cols, hb.data(), b_cols, g.beta, hc.data(), g.n);
      cblas_s += seconds_since(t0);
      if (vs_onednn) {
        core::set_gemm_backend(core::GemmBackend::onednn);
        t0 = Clock::now();
        core::gemm(g.ta, g.tb, 1.0F, am, bm, g.beta, cm);
        fence();
        onednn_s += seconds_since(t0);
        core::set_gemm_backend(ours_backend);
      }
      ours_s += ours;
      state.SetIterationTime(ours);
    }
    benchmark::DoNotOptimize(hc.data());
    const double flops = 2.0 * static_cast<double>(g.m) * static_cast<double>(g.n) *
                         static_cast<double>(g.k) * static_cast<double>(state.iterations());
    state.counters["GFLOPs"] = flops / ours_s * 1e-9;
    state.counters["cblas_GFLOPs"] = flops / cblas_s * 1e-9;
    state.counters["vs_cblas"] = cblas_s / ours_s;
    if (vs_onednn) {
      state.counters["onednn_GFLOPs"] = flops / onednn_s * 1e-9;
      state.counters["vs_onednn"] = onednn_s / ours_s;
    }
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

/// Deterministic training's weight gradient over a node of micro-shards: gemm_tn_leaf_tree (each
/// leaf's product, added over the tree) against the plain product over all the rows (what
/// ordinary training runs), on the same matrices in the same iteration.
void bench_gemm_leaf_tree(benchmark::State& state, const GemmShape& g, std::int64_t leaf_rows) {
  try {
    const auto a = random_vec("bench::dy", g.k * g.m, 1);
    const auto b = random_vec("bench::x", g.k * g.n, 2);
    const auto c = core::make_tensor<float>("bench::c", {g.m * g.n}).data;
    const auto am = core::as_matrix(a, g.k, g.m);
    const auto bm = core::as_matrix(b, g.k, g.n);
    const auto cm = core::as_matrix(c, g.m, g.n);
    core::gemm_tn_leaf_tree(leaf_rows, am, bm, cm);  // warm-up: kernels generated, scratch paged in
    core::gemm(Trans::yes, Trans::no, 1.0F, am, bm, 0.0F, cm);
    fence();
    double tree_s = 0, plain_s = 0;
    for (auto _ : state) {
      auto t0 = Clock::now();
      core::gemm_tn_leaf_tree(leaf_rows, am, bm, cm);
      fence();
      const double tree = seconds_since(t0);
      t0 = Clock::now();
      core::gemm(Trans::yes, Trans::no, 1.0F, am, bm, 0.0F, cm);
      fence();
      plain_s += seconds_since(t0);
      tree_s += tree;
      state.SetIterationTime(tree);
    }
    const double flops = 2.0 * static_cast<double>(g.m) * static_cast<double>(g.n) *
                         static_cast<double>(g.k) * static_cast<double>(state.iterations());
    state.counters["GFLOPs"] = flops / tree_s * 1e-9;
    state.counters["plain_GFLOPs"] = flops / plain_s * 1e-9;
    state.counters["frac_of_plain"] = plain_s / tree_s;
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

void bench_bound(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  const auto ha = random_host(n * n, 1);
  const auto hb = random_host(n * n, 2);
  std::vector<float> hc(static_cast<std::size_t>(n * n), 0.0F);
#ifdef HPCTRAIN_BENCH_OPENBLAS
  const int threads_before = openblas_get_num_threads();
  openblas_set_num_threads(1);
#else
  state.SetLabel("BLAS thread count not controllable: not OpenBLAS");
#endif
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0F, ha.data(), n,
              hb.data(), n, 0.0F, hc.data(), n);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0F, ha.data(), n,
                hb.data(), n, 0.0F, hc.data(), n);
  }
  benchmark::DoNotOptimize(hc.data());
#ifdef HPCTRAIN_BENCH_OPENBLAS
  openblas_set_num_threads(threads_before);
#endif
  state.counters["GFLOPs"] = benchmark::Counter(2.0 * static_cast<double>(n * n) *
                                                    static_cast<double>(n) * 1e-9,
                                                benchmark::Counter::kIsIterationInvariantRate);
}

// ---- conv ----------------------------------------------------------------------------------

struct ConvCase {
  std::string name;
  core::Conv2dGeometry g;
  bool first_layer = false;  ///< the model's first layer: its backward computes no input gradient
};

std::vector<ConvCase> cnn_convs(std::int64_t batch) {
  core::Conv2dGeometry conv1;
  conv1.batch = batch;
  conv1.in_channels = 1;
  conv1.height = conv1.width = 28;
  conv1.out_channels = 32;
  conv1.kernel = 5;
  conv1.pad = 2;
  core::Conv2dGeometry conv2 = conv1;
  conv2.in_channels = 32;
  conv2.height = conv2.width = 14;
  conv2.out_channels = 64;
  return {{"cnn.conv1", conv1, true}, {"cnn.conv2", conv2, false}};
}

/// `with_dx`: the backward also computes the input gradient (every layer but the first).
void bench_conv(benchmark::State& state, const core::Conv2dGeometry& g, bool backward, bool with_dx,
                core::ConvBackend backend) {
  try {
    core::set_conv_backend(backend);
    const std::int64_t F = g.out_channels, CKK = g.col_rows(), NP = g.col_cols();
    const std::int64_t x_n = g.batch * g.in_channels * g.height * g.width;
    const std::int64_t y_n = g.batch * F * g.out_height() * g.out_width();
    const auto x = random_vec("bench::x", x_n, 1);
    const auto w = random_vec("bench::w", F * CKK, 2);
    const auto b = random_vec("bench::b", F, 3);
    const auto dy = random_vec("bench::dy", y_n, 4);
    const auto y = core::make_tensor<float>("bench::y", {y_n}).data;
    const auto dw = core::make_tensor<float>("bench::dw", {F * CKK}).data;
    const auto db = core::make_tensor<float>("bench::db", {F}).data;
    const core::Vec<float> dx = with_dx ? core::make_tensor<float>("bench::dx", {x_n}).data : core::Vec<float>();
    core::Conv2dWorkspace<float> ws;
    core::Conv2dWorkspace<float> gemm_ws;  // the portable path's buffers, for the bare gemms
    gemm_ws.reserve(g);
    core::im2col(g, x, gemm_ws.col);
    auto conv = [&] {
      core::conv2d_forward(g, x, w, b, ws, y);
      if (backward) core::conv2d_backward(g, w, dy, ws, dw, db, dx);
      fence();
    };
    // The gemms the convolution lowers to, on the same buffers (ws.yt stands in for dyt).
    auto bare_gemms = [&] {
      core::gemm(Trans::no, Trans::no, 1.0F, core::as_matrix(w, F, CKK),
                 core::as_matrix(gemm_ws.col, CKK, NP), 0.0F, core::as_matrix(gemm_ws.yt, F, NP));
      if (backward) {
        core::gemm(Trans::no, Trans::yes, 1.0F, core::as_matrix(gemm_ws.yt, F, NP),
                   core::as_matrix(gemm_ws.col, CKK, NP), 1.0F, core::as_matrix(dw, F, CKK));
        if (with_dx) {
          core::gemm(Trans::yes, Trans::no, 1.0F, core::as_matrix(w, F, CKK),
                     core::as_matrix(gemm_ws.yt, F, NP), 0.0F, core::as_matrix(gemm_ws.dcol, CKK, NP));
        }
      }
      fence();
    };
    conv();  // warm-up, sizes the workspace
    bare_gemms();
    double conv_s = 0, gemm_s = 0;
    for (auto _ : state) {
      auto t0 = Clock::now();
      conv();
      const double t = seconds_since(t0);
      t0 = Clock::now();
      bare_gemms();
      gemm_s += seconds_since(t0);
      conv_s += t;
      state.SetIterationTime(t);
    }
    const double passes = backward ? (with_dx ? 3.0 : 2.0) : 1.0;
    const double flops = passes * 2.0 * static_cast<double>(F * NP) * static_cast<double>(CKK) *
                         static_cast<double>(state.iterations());
    state.counters["GFLOPs"] = flops / conv_s * 1e-9;
    state.counters["gemm_GFLOPs"] = flops / gemm_s * 1e-9;
    state.counters["frac_of_gemm"] = gemm_s / conv_s;
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

// ---- memory-bound kernels --------------------------------------------------------------------

/// One memory-bound kernel: `run` moves `bytes` (reads + writes, each element once). Timed
/// alternately in each iteration with a copy of the same number of bytes (half read, half
/// written, Kokkos::deep_copy = memcpy) on buffers of the same size, so frac_of_copy = copy
/// time / kernel time says how close the kernel is to the memory bandwidth at its own size
/// (cache level included) on the same machine at the same moment.
void bench_streaming(benchmark::State& state, const std::function<void()>& run, double bytes) {
  try {
    const auto half = static_cast<std::int64_t>(bytes / 8);  // floats per side of the copy
    const auto src = random_vec("bench::copy_src", half, 9);
    const auto dst = core::make_tensor<float>("bench::copy_dst", {half}).data;
    run();
    Kokkos::deep_copy(dst, src);
    fence();
    double kernel_s = 0, copy_s = 0;
    for (auto _ : state) {
      auto t0 = Clock::now();
      run();
      fence();
      const double t = seconds_since(t0);
      t0 = Clock::now();
      Kokkos::deep_copy(dst, src);
      fence();
      copy_s += seconds_since(t0);
      kernel_s += t;
      state.SetIterationTime(t);
    }
    const double n = static_cast<double>(state.iterations());
    state.counters["GB_per_s"] = bytes * n / kernel_s * 1e-9;
    state.counters["copy_GB_per_s"] = bytes * n / copy_s * 1e-9;
    state.counters["frac_of_copy"] = copy_s / kernel_s;
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

/// The streaming benchmarks' buffers: created at registration, released before Kokkos is
/// finalised (a View must not outlive Kokkos).
struct StreamingBuffers {
  core::Vec<float> x, y, dy, dx, p, g, pooled_y, pooled_dy;
  Kokkos::View<std::int64_t*, core::MemSpace> argmax;
  core::Tensor<float> logits, dlogits;
  core::Labels labels;
  core::Sgd<float> sgd{[] {
    core::SgdOptions o;
    o.lr = 0.01;
    o.momentum = 0.9;
    return o;
  }()};
  core::AdamW<float> adamw{core::AdamWOptions{}};
};
std::unique_ptr<StreamingBuffers> streaming_buffers;

/// The CNN's element-wise work at batch 64 (conv1's output, 64 x 32 x 28 x 28) and the
/// optimiser over the CNN's parameters.
void register_streaming_benchmarks() {
  const std::int64_t n = 64 * 32 * 28 * 28, pooled = n / 4, params = 857738;
  auto& b = *(streaming_buffers = std::make_unique<StreamingBuffers>());
  b.x = random_vec("bench::ew_x", n, 11);
  b.y = core::make_tensor<float>("bench::ew_y", {n}).data;
  b.dy = random_vec("bench::ew_dy", n, 12);
  b.dx = core::make_tensor<float>("bench::ew_dx", {n}).data;
  b.p = random_vec("bench::p", params, 13);
  b.g = random_vec("bench::g", params, 14);
  b.pooled_y = core::make_tensor<float>("bench::pooled_y", {pooled}).data;
  b.pooled_dy = random_vec("bench::pooled_dy", pooled, 16);
  b.argmax = Kokkos::View<std::int64_t*, core::MemSpace>("bench::argmax", static_cast<std::size_t>(pooled));
  b.logits = core::tensor_from_host<float>("bench::logits", {64 * 16, 10}, random_host(64 * 16 * 10, 15));
  b.dlogits = core::make_tensor<float>("bench::dlogits", {64 * 16, 10});
  b.labels = core::Labels("bench::labels", 64 * 16);
  core::Pool2dGeometry pg;
  pg.batch = 64; pg.channels = 32; pg.height = pg.width = 28; pg.kernel = pg.stride = 2;
  const double f = sizeof(float), i64 = sizeof(std::int64_t);
  struct Case {
    std::string name;
    std::function<void()> run;
    double bytes;
  };
  const std::vector<Case> cases{
      {"relu_fwd", [&b] { core::relu_forward(b.x, b.y); }, 2 * f * n},
      {"relu_bwd", [&b] { core::relu_backward(b.x, b.dy, b.dx); }, 3 * f * n},
      {"maxpool2x2_fwd", [&b, pg] { core::maxpool2d_forward(pg, b.x, b.pooled_y, b.argmax); },
       f * n + (f + i64) * pooled},
      {"maxpool2x2_bwd", [&b, pg] { core::maxpool2d_backward(pg, b.pooled_dy, b.argmax, b.dx); },
       f * n + (f + i64) * pooled + f * pooled},
      {"softmax_ce", [&b] { core::softmax_cross_entropy(b.logits, b.labels, 64 * 16, b.dlogits); }, 2 * f * 64 * 16 * 10},
      {"sgd_momentum", [&b] { b.sgd.step(b.p, b.g); }, 5 * f * params},
      // reads p, g, m, v; writes p, m, v
      {"adamw", [&b] { b.adamw.step(b.p, b.g); }, 7 * f * params},
      // The gradient's finiteness scan before every optimiser step (read once).
      {"count_nonfinite", [&b] { benchmark::DoNotOptimize(core::count_nonfinite(b.g)); }, f * params},
  };
  for (const auto& c : cases) {
    benchmark::RegisterBenchmark(("stream/" + c.name).c_str(), bench_streaming, c.run, c.bytes)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
  }
}

/// A training batch from a data set held in memory: 128 rows of 784 floats (the MLP's batch on
/// one rank) at random places in a 60,000-row table (Fashion-MNIST's 188 MB training split, far
/// larger than the caches), a fresh random set each iteration. Timed: core::gather_rows_from_host
/// straight into the model's input, as the trainer loads an in-memory batch (since stop 47).
/// Peer in the same iteration: the path before it, the rows copied one after another into a
/// new host vector (io::InMemoryDataset::read) and that vector copied into the input
/// (core::from_host). frac_of_copy_path: the peer's time over the gather's.
void bench_batch_gather(benchmark::State& state) {
  try {
    constexpr std::int64_t kRows = 60000, kWidth = 784, kBatch = 128;
    static const std::vector<float> table = random_host(kRows * kWidth, 21);
    const core::Vec<float> x = core::make_tensor<float>("bench::batch_x", {kBatch * kWidth}).data;
    std::mt19937_64 gen(22);
    std::uniform_int_distribution<std::int64_t> pick(0, kRows - 1);
    std::vector<std::int64_t> rows(kBatch);
    double gather_s = 0, copy_path_s = 0;
    for (auto _ : state) {
      for (auto& r : rows) r = pick(gen);
      auto t0 = Clock::now();
      core::gather_rows_from_host(x, table.data(), kWidth, rows.data(), kBatch);
      fence();
      const double t = seconds_since(t0);
      for (auto& r : rows) r = pick(gen);
      t0 = Clock::now();
      {
        std::vector<float> samples;
        samples.resize(static_cast<std::size_t>(kBatch * kWidth));
        for (std::int64_t k = 0; k < kBatch; ++k) {
          std::copy_n(table.data() + rows[static_cast<std::size_t>(k)] * kWidth, kWidth, samples.data() + k * kWidth);
        }
        core::from_host(x, samples);
        fence();
      }
      copy_path_s += seconds_since(t0);
      gather_s += t;
      state.SetIterationTime(t);
    }
    const double n = static_cast<double>(state.iterations());
    state.counters["us_per_batch"] = gather_s / n * 1e6;
    state.counters["copy_path_us_per_batch"] = copy_path_s / n * 1e6;
    state.counters["frac_of_copy_path"] = copy_path_s / gather_s;
    state.counters["GB_per_s"] = 2.0 * sizeof(float) * kBatch * kWidth * n / gather_s * 1e-9;
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

// ---- training step -------------------------------------------------------------------------

/// The training steps' optimiser: SGD, lr 0.01, momentum 0.9.
core::SgdOptions training_step_sgd() {
  core::SgdOptions o;
  o.lr = 0.01;
  o.momentum = 0.9;
  return o;
}

/// A batch of `batch` random 1x28x28 images with labels 0..9 in turn.
struct ImageBatch {
  core::Tensor<float> x;
  core::Labels labels;

  explicit ImageBatch(std::int64_t batch)
      : x(core::tensor_from_host<float>("bench::x", {batch, 1, 28, 28}, random_host(batch * 28 * 28, 5))),
        labels("bench::labels", static_cast<std::size_t>(batch)) {
    auto h = Kokkos::create_mirror_view(labels);
    for (std::int64_t i = 0; i < batch; ++i) h(i) = static_cast<std::int32_t>(i % 10);
    Kokkos::deep_copy(labels, h);
  }
  /// Rows [first, first + rows), sharing the storage.
  ImageBatch rows(std::int64_t first, std::int64_t rows) const {
    const auto sample = x.size() / x.dim(0);
    ImageBatch part = *this;
    part.x = core::Tensor<float>(Kokkos::subview(x.data, std::make_pair(first * sample, (first + rows) * sample)),
                                 {rows, 1, 28, 28});
    part.labels = Kokkos::subview(labels, std::make_pair(first, first + rows));
    return part;
  }
};

void bench_train_step(benchmark::State& state, const std::string& model_name) {
  try {
    const std::int64_t batch = state.range(0);
    auto model = models::build_model<float>(nlohmann::json{{"name", model_name}, {"seed", 1}});
    const ImageBatch data(batch);
    const auto& x = data.x;
    const auto& labels = data.labels;
    const auto dlogits = core::make_tensor<float>("bench::dlogits", {batch, 10});
    core::Sgd<float> optimizer(training_step_sgd());
    double loss = 0;
    auto step = [&] {
      model->zero_gradients();
      const auto logits = model->forward(x, true);
      loss = core::softmax_cross_entropy(logits, labels, batch, dlogits);
      model->backward(dlogits);
      optimizer.step(model->parameter_buffer(), model->gradient_buffer());
      fence();
    };
    step();  // warm-up: allocates activations and optimizer state
    for (auto _ : state) step();
    benchmark::DoNotOptimize(loss);
    state.counters["samples_per_s"] =
        benchmark::Counter(static_cast<double>(batch), benchmark::Counter::kIsIterationInvariantRate);
    state.counters["loss"] = loss;
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

// Deterministic mode's compute pattern without its collectives: the batch cut into micro-shards
// of `shard` rows, each computed on its own, the first into the model's gradient buffer and the
// others into buffers of their own (as train::DeterministicSync computes a term straight into
// the tree sum's storage, lending the model's buffer for the first), the terms then summed
// pairwise into the first; against the whole batch in one pass (the ordinary step), alternating
// within each iteration. What the ratio shows is what smaller gemm calls and a gradient buffer
// per micro-shard cost on one core, before any communication. With one_buffer = 1 every
// micro-shard adds into the model's buffer instead (not deterministic mode's arithmetic: the cost
// any arrangement of the sum leaves, i.e. that of the 16-row passes alone).
void bench_train_step_micro_shards(benchmark::State& state, const std::string& model_name) {
  try {
    const std::int64_t batch = state.range(0);
    const std::int64_t shard = state.range(1);
    const std::int64_t shards = (batch + shard - 1) / shard;
    const bool one_buffer = state.range(2) != 0;
    const bool grouped = state.range(3) != 0;
    auto model = models::build_model<float>(nlohmann::json{{"name", model_name}, {"seed", 1}});
    if (grouped && !model->supports_gradient_leaves()) {
      state.SkipWithError(("the " + model_name + " has layers without leaf-row support: no grouped passes").c_str());
      return;
    }
    const ImageBatch data(batch);
    std::vector<ImageBatch> parts;
    for (std::int64_t s = 0; s < shards; ++s) parts.push_back(data.rows(s * shard, std::min(shard, batch - s * shard)));
    // Where micro-shard s's gradient goes: the model's buffer (empty Vec) for the first, and
    // with one_buffer for all; a buffer of its own for each of the others.
    std::vector<core::Vec<float>> terms(static_cast<std::size_t>(shards));
    for (std::int64_t s = 1; s < shards && !one_buffer; ++s) {
      terms[static_cast<std::size_t>(s)] = core::Vec<float>("bench::term", model->parameter_count());
    }
    core::Tensor<float> dlogits;
    core::Sgd<float> optimizer(training_step_sgd());
    double loss = 0;
    auto pass = [&](const ImageBatch& b) {
      const auto logits = model->forward(b.x, true);
      core::ensure_shape(dlogits, "bench::dlogits", logits.shape);
      loss = core::softmax_cross_entropy(logits, b.labels, batch, dlogits);
      model->backward(dlogits);
    };
    auto whole = [&] {
      model->begin_gradients();
      pass(data);
      optimizer.step(model->parameter_buffer(), model->gradient_buffer());
      fence();
    };
    auto sharded = [&] {
      if (grouped) {  // one pass, the micro-shards as leaves (DeterministicSync's grouped passes)
        model->set_gradient_leaves(shard);
        model->begin_gradients();
        pass(data);
        model->set_gradient_leaves(0);
        optimizer.step(model->parameter_buffer(), model->gradient_buffer());
        fence();
        return;
      }
      for (std::int64_t s = 0; s < shards; ++s) {
        model->redirect_gradients(terms[static_cast<std::size_t>(s)]);
        if (s == 0 || !one_buffer) model->begin_gradients();  // else: adds into the model's buffer
        pass(parts[static_cast<std::size_t>(s)]);
      }
      model->redirect_gradients(core::Vec<float>());
      auto term = [&](std::int64_t s) { return s == 0 ? model->gradient_buffer() : terms[static_cast<std::size_t>(s)]; };
      for (std::int64_t width = 1; width < shards && !one_buffer; width *= 2) {  // pairwise, as the tree sum
        for (std::int64_t s = 0; s + width < shards; s += 2 * width) core::axpy(1.0F, term(s + width), term(s));
      }
      optimizer.step(model->parameter_buffer(), model->gradient_buffer());
      fence();
    };
    whole();  // warm-up: activations, optimiser state, oneDNN primitives for both shapes
    sharded();
    double whole_s = 0, sharded_s = 0;
    for (auto _ : state) {
      auto t0 = Clock::now();
      whole();
      whole_s += seconds_since(t0);
      t0 = Clock::now();
      sharded();
      const double t = seconds_since(t0);
      sharded_s += t;
      state.SetIterationTime(t);
    }
    benchmark::DoNotOptimize(loss);
    const double iters = static_cast<double>(state.iterations());
    state.counters["samples_per_s"] = static_cast<double>(batch) * iters / sharded_s;
    state.counters["whole_batch_samples_per_s"] = static_cast<double>(batch) * iters / whole_s;
    state.counters["frac_of_whole_batch"] = whole_s / sharded_s;
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

void register_benchmarks() {
  for (const auto& g : training_gemm_shapes()) {
    const std::string name = "gemm/" + g.name + "/" + std::to_string(g.m) + "x" +
                             std::to_string(g.n) + "x" + std::to_string(g.k);
    benchmark::RegisterBenchmark(name.c_str(), bench_gemm, g)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
  }
  for (const GemmShape& g : training_gemm_shapes()) {
    if (g.name.rfind("mlp.", 0) != 0 || g.name.find(".dW") == std::string::npos) continue;
    const std::int64_t leaf = 16;
    const std::string name = "gemm_leaf_tree/" + g.name + "/" + std::to_string(g.m) + "x" + std::to_string(g.n) +
                             "x" + std::to_string(g.k) + "/leaf:" + std::to_string(leaf);
    benchmark::RegisterBenchmark(name.c_str(), bench_gemm_leaf_tree, g, leaf)->UseManualTime()->Unit(benchmark::kMicrosecond);
  }
  benchmark::RegisterBenchmark("bound/cblas_sgemm_1thread", bench_bound)
      ->Arg(1024)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  std::vector<core::ConvBackend> backends{core::ConvBackend::portable};
  if (core::onednn_available()) backends.push_back(core::ConvBackend::onednn);
  for (const auto& c : cnn_convs(64)) {
    // fwd, fwd+bwd (weight, bias and input gradients) and, for the model's first layer, the
    // backward the model runs there: weight and bias gradients only (fwd+bwd-no-dx).
    struct Variant {
      const char* suffix;
      bool backward, with_dx;
    };
    std::vector<Variant> variants{{"/fwd/", false, false}, {"/fwd+bwd/", true, true}};
    if (c.first_layer) variants.push_back({"/fwd+bwd-no-dx/", true, false});
    for (const Variant& v : variants) {
      for (const auto backend : backends) {
        const std::string name = "conv/" + c.name + v.suffix + core::conv_backend_name(backend);
        benchmark::RegisterBenchmark(name.c_str(), bench_conv, c.g, v.backward, v.with_dx, backend)
            ->UseManualTime()
            ->Unit(benchmark::kMillisecond);
      }
    }
  }
  register_streaming_benchmarks();
  benchmark::RegisterBenchmark("stream/batch_gather/mlp", bench_batch_gather)->UseManualTime()->Unit(benchmark::kMicrosecond);
  for (const std::string model : {"mlp", "cnn"}) {
    benchmark::RegisterBenchmark(("train_step/" + model).c_str(), bench_train_step, model)
        ->Arg(64)
        ->Arg(128)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
  // Per rank at global batch 128 on 2 ranks: the default micro-shard (16) and 32.
  // grouped:1 only for the MLP: the CNN's convolutions have no leaf rows.
  for (const std::string model : {"mlp", "cnn"}) {
    auto* b = benchmark::RegisterBenchmark(("train_step_micro_shards/" + model).c_str(), bench_train_step_micro_shards,
                                           model)
                  ->ArgNames({"batch", "shard", "one_buffer", "grouped"})
                  ->Args({64, 16, 0, 0})
                  ->Args({64, 16, 1, 0})
                  ->Args({64, 32, 0, 0});
    if (model == "mlp") b->Args({64, 16, 0, 1});
    b->UseManualTime()->Unit(benchmark::kMillisecond);
  }
}

}  // namespace

int main(int argc, char** argv) {
  hpctrain::choose_openblas_kernels(argv);  // before anything uses BLAS (may re-execute)
  Kokkos::initialize(argc, argv);
  int rc = 0;
  {
    benchmark::AddCustomContext("kokkos_version", std::to_string(KOKKOS_VERSION));
    benchmark::AddCustomContext("kokkos_exec_space", core::ExecSpace::name());
    benchmark::AddCustomContext("kokkos_concurrency",
                                std::to_string(core::ExecSpace::concurrency()));
#ifdef HPCTRAIN_BENCH_OPENBLAS
    benchmark::AddCustomContext("openblas_threads", std::to_string(openblas_get_num_threads()));
    benchmark::AddCustomContext("openblas_config", openblas_get_config());
    const std::string blas_core = openblas_get_corename();  // what DYNAMIC_ARCH picked
    benchmark::AddCustomContext("openblas_core", blas_core);
    // OpenBLAS 0.3.21 does not recognise some newer Xeons (cpuinfo "Intel(R) Xeon(R)
    // Processor") and falls back to its SSE3 Prescott kernels: ~6x slower sgemm here.
    if ((blas_core == "Prescott" || blas_core == "Core2" || blas_core == "Nehalem") &&
        __builtin_cpu_supports("avx2")) {
      std::fprintf(stderr,
                   "bench_kernels: OpenBLAS chose its %s kernels on an AVX2 CPU; set "
                   "OPENBLAS_CORETYPE=SkylakeX (AVX-512) or Haswell (AVX2) for real figures\n",
                   blas_core.c_str());
    }
#endif
    register_benchmarks();
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) {
      rc = 1;
    } else {
      benchmark::RunSpecifiedBenchmarks();
    }
    benchmark::Shutdown();
    streaming_buffers.reset();
  }
  Kokkos::finalize();
  return rc;
}
