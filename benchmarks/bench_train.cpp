// bench_train: training throughput (samples/s) of hpctrain's data-parallel loop for the built-in
// models, at the launcher's rank count. See docs/benchmarks-training.md.
//
//   mpirun -n P build/bin/bench_train [--models=mlp,cnn] [--steps=N] [--warmup=N] [--iters=N]
//          [--global_batch=128] [--epochs=N [--max_steps=N]] [--data=TRAIN.h5] [--eval_data=TEST.h5]
//          [--lr=0.05] [--momentum=0.9] [--seed=42] [--init_seed=N] [--algo=auto] [--deterministic=0|1|0,1]
//          [--micro_shard=16] [--strategies=ddp,zero1,zero2] [--optimizer=sgd|adamw]
//          [--grad_dtype=f32|bf16|f16 [--error_feedback=0|1]] [Google Benchmark flags]
//
// One benchmark per model and deterministic setting, `train/<model>/P:<ranks>` and, with
// --deterministic=1 (or 0,1: both, in the same run), `train/<model>/P:<ranks>/deterministic`
// (`hpctrain train --deterministic --micro-shard N`; docs/deterministic.md); a strategy other
// than ddp (--strategies, docs/strategies.md) appends `/<strategy>`, a --grad_dtype other than
// f32 `/<dtype>` (and `/ef` with --error_feedback=1: `hpctrain train --grad-error-feedback`). A --models entry ending in `.json` is a model config file (e.g. a wide MLP
// for the memory counters), named by its file name. Google Benchmark
// appends `/iterations:N/manual_time`. --seed is the epoch order's seed (`hpctrain train --seed`);
// --init_seed, when given, replaces the model config's "seed" (its initial parameters; default
// the config's, 0 for the built-in models). One iteration = one call of hpctrain::train::run_training — the
// code `hpctrain train` runs: HDF5 reader with prefetch, forward/backward, bucketed overlapped
// gradient all-reduce, SGD — from a freshly built model (same seed, so iterations repeat the
// same run). Every rank runs the same number of iterations and, inside each, the same number
// of steps, fixed up front (no Google Benchmark iteration estimate, which would differ per
// rank); a barrier precedes each iteration, outside the timed region.
//
// Two modes:
//  * steps (default): `warmup` + `steps` optimiser steps (epochs as many as that needs), no
//    evaluation. The iteration's time is that of the `steps` measured steps, the slowest rank's.
//  * epochs (--epochs=N with --steps=0): N whole epochs (or until --max_steps optimiser steps),
//    evaluation on --eval_data after each epoch and at the end (excluded from the timing);
//    counters add the test accuracy. This is what scripts/compare-torch.sh runs against
//    PyTorch DDP (benchmarks/peers/torch_ddp.py), whose options mirror these.
//
// Counters (rank 0 reports; times are the max over ranks where marked):
//   samples_per_s     global samples per second after warm-up (max-over-ranks time), median of
//                     the iterations; samples_per_s_best is the best iteration
//   samples_per_s_per_rank, ranks, global_batch, steps (measured, per iteration)
//   compute_frac, comm_frac, data_frac   rank 0's compute / exposed (waited-for) all-reduce /
//                     data-wait seconds over its whole run time (warm-up included)
//   gflop_per_s       samples_per_s x the model's training FLOPs per sample (below) — compare
//                     with what the cores' BLAS can do to see how far from the compute bound
//   cpu_util          rank 0's process CPU seconds (all its threads) over its wall seconds: on
//                     a shared machine, how much of a core the run actually got (~1 alone)
//   test_accuracy, test_loss, final_loss  (epochs mode with --eval_data)
//   optimizer_state_bytes, gradient_bytes, parameter_bytes, peak_rss_bytes   what one rank
//                     holds, the largest over the ranks (the --metrics summary's fields)
//
// The bound. A training step costs ~3x the forward multiply-adds, 2 FLOP each (forward, weight
// gradient, input gradient; the first layer needs no input gradient):
//   mlp 784-512-256-10:   2.41 MFLOP/sample;  cnn (conv5x5x32, conv5x5x64, 256, 10): 67.6 MFLOP/sample
// so at G GFLOP/s per rank, P ranks cannot exceed P*G*1e3/67.6 CNN samples/s (the CNN is
// gemm-bound: ~1.3k samples/s/rank at a single-core OpenBLAS ~90 GFLOP/s), while the MLP is
// far from that bound and limited by per-step overheads (data, kernels, all-reduce latency).
//
// Knobs: the flags above, or HPCTRAIN_BENCH_{MODELS,STEPS,WARMUP,ITERS,GLOBAL_BATCH,EPOCHS,DATA,
// EVAL_DATA}. Without --data the Fashion-MNIST HDF5 files of `hpctrain train` are used
// ($HPCTRAIN_DATA_DIR, default ~/.cache/hpctrain), imported from Debian's IDX files on first use.

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include <sys/resource.h>
#include <string>
#include <vector>

#include "hpctrain/base/error.hpp"
#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/collectives/mpi_transport.hpp"
#include "hpctrain/core/environment.hpp"
#include "hpctrain/io/fashion_mnist_cache.hpp"
#include "hpctrain/train/trainer.hpp"
#include "mpi_benchmark.hpp"

namespace {

namespace fs = std::filesystem;
using hpctrain::coll::Communicator;

struct Options {
  std::vector<std::string> models{"mlp", "cnn"};
  std::int64_t steps = 200;  // measured steps per iteration (steps mode)
  std::int64_t warmup = 10;  // steps excluded from samples/s
  std::int64_t iters = 3;
  std::int64_t global_batch = 128;
  std::int64_t epochs = 0;   // > 0 with steps == 0: epochs mode
  std::int64_t max_steps = 0;  // epochs mode: stop after this many steps (0: whole epochs)
  std::string data, eval_data;
  double lr = 0.05, momentum = 0.9;
  std::uint64_t seed = 42;
  std::optional<std::uint64_t> init_seed;  // the model config's "seed" when unset
  std::string algo = "auto";
  std::vector<bool> deterministic{false};
  std::int64_t micro_shard = 16;
  std::vector<std::string> strategies{"ddp"};
  std::string optimizer = "sgd";
  std::string grad_dtype = "f32";
  bool error_feedback = false;
};

std::vector<std::string> split_list(const std::string& text, const std::string& what) {
  std::vector<std::string> out;
  std::stringstream list(text);
  for (std::string item; std::getline(list, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  HPCTRAIN_REQUIRE(!out.empty(), what + "='" + text + "' names nothing");
  return out;
}

/// A built-in model's name, or a JSON config file (`*.json`).
nlohmann::json model_config(const std::string& model) {
  if (model.size() < 5 || model.compare(model.size() - 5, 5, ".json") != 0) return {{"name", model}};
  std::ifstream in(model);
  HPCTRAIN_REQUIRE(in.good(), "models: cannot read model config '" + model + "'");
  return nlohmann::json::parse(in);
}

double parse_real(const std::string& text, const std::string& what) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  HPCTRAIN_REQUIRE(errno == 0 && end != text.c_str() && *end == '\0',
                   what + "='" + text + "' is not a number");
  return v;
}

Options parse_options(int& argc, char** argv) {
  using hpctrain::bench::flag_or_env;
  using hpctrain::bench::parse_count;
  using hpctrain::bench::take_flag;
  Options o;
  if (auto v = flag_or_env(take_flag(argc, argv, "models"), "HPCTRAIN_BENCH_MODELS")) {
    o.models.clear();
    std::stringstream list(*v);
    for (std::string name; std::getline(list, name, ',');) {
      if (!name.empty()) o.models.push_back(name);
    }
    HPCTRAIN_REQUIRE(!o.models.empty(), "models='" + *v + "' names no model");
  }
  if (auto v = flag_or_env(take_flag(argc, argv, "steps"), "HPCTRAIN_BENCH_STEPS"))
    o.steps = parse_count(*v, "steps", 0);
  if (auto v = flag_or_env(take_flag(argc, argv, "warmup"), "HPCTRAIN_BENCH_WARMUP"))
    o.warmup = parse_count(*v, "warmup", 1);
  if (auto v = flag_or_env(take_flag(argc, argv, "iters"), "HPCTRAIN_BENCH_ITERS"))
    o.iters = parse_count(*v, "iters", 1);
  if (auto v = flag_or_env(take_flag(argc, argv, "global_batch"), "HPCTRAIN_BENCH_GLOBAL_BATCH"))
    o.global_batch = parse_count(*v, "global_batch", 1);
  if (auto v = flag_or_env(take_flag(argc, argv, "epochs"), "HPCTRAIN_BENCH_EPOCHS"))
    o.epochs = parse_count(*v, "epochs", 1);
  if (auto v = take_flag(argc, argv, "max_steps")) o.max_steps = parse_count(*v, "max_steps", 0);
  if (auto v = flag_or_env(take_flag(argc, argv, "data"), "HPCTRAIN_BENCH_DATA")) o.data = *v;
  if (auto v = flag_or_env(take_flag(argc, argv, "eval_data"), "HPCTRAIN_BENCH_EVAL_DATA")) o.eval_data = *v;
  if (auto v = take_flag(argc, argv, "lr")) o.lr = parse_real(*v, "lr");
  if (auto v = take_flag(argc, argv, "momentum")) o.momentum = parse_real(*v, "momentum");
  if (auto v = take_flag(argc, argv, "seed")) o.seed = static_cast<std::uint64_t>(parse_count(*v, "seed", 0));
  if (auto v = take_flag(argc, argv, "init_seed")) {
    o.init_seed = static_cast<std::uint64_t>(parse_count(*v, "init_seed", 0));
  }
  if (auto v = take_flag(argc, argv, "algo")) o.algo = *v;
  if (auto v = flag_or_env(take_flag(argc, argv, "deterministic"), "HPCTRAIN_BENCH_DETERMINISTIC")) {
    o.deterministic.clear();
    std::stringstream list(*v);
    for (std::string item; std::getline(list, item, ',');) {
      HPCTRAIN_REQUIRE(item == "0" || item == "1", "deterministic='" + *v + "': expected 0, 1 or 0,1");
      o.deterministic.push_back(item == "1");
    }
    HPCTRAIN_REQUIRE(!o.deterministic.empty(), "deterministic='" + *v + "' names no setting");
  }
  if (auto v = take_flag(argc, argv, "micro_shard")) o.micro_shard = parse_count(*v, "micro_shard", 1);
  if (auto v = take_flag(argc, argv, "strategies")) o.strategies = split_list(*v, "strategies");
  if (auto v = take_flag(argc, argv, "optimizer")) o.optimizer = *v;
  if (auto v = take_flag(argc, argv, "grad_dtype")) o.grad_dtype = *v;
  if (auto v = take_flag(argc, argv, "error_feedback")) o.error_feedback = parse_count(*v, "error_feedback", 0) != 0;
  HPCTRAIN_REQUIRE(o.steps > 0 || o.epochs > 0, "steps=0 needs epochs=N (epochs mode)");
  if (o.steps > 0) o.epochs = 0;  // steps mode wins
  return o;
}

/// Training FLOPs per sample of the built-in models with their default configuration (see the
/// bound above); 0 for anything else (the gflop_per_s counter is then left out).
double train_flop_per_sample(const std::string& model) {
  // 2 FLOP per multiply-add; forward + weight gradient + input gradient, none for layer 1's input.
  auto dense = [](double in, double out, bool first) { return 2.0 * in * out * (first ? 2 : 3); };
  auto conv = [](double c, double f, double k, double hw, bool first) {
    return 2.0 * c * k * k * f * hw * (first ? 2 : 3);
  };
  if (model == "mlp") return dense(784, 512, true) + dense(512, 256, false) + dense(256, 10, false);
  if (model == "cnn") {
    return conv(1, 32, 5, 28 * 28, true) + conv(32, 64, 5, 14 * 14, false) +
           dense(64 * 7 * 7, 256, false) + dense(256, 10, false);
  }
  if (model == "resnet") {  // channels 16, 32, 64, one block per stage (models/resnet.cpp); BN not counted
    return conv(1, 16, 3, 28 * 28, true) + 2 * conv(16, 16, 3, 28 * 28, false) + conv(16, 32, 3, 14 * 14, false) +
           conv(32, 32, 3, 14 * 14, false) + conv(16, 32, 1, 14 * 14, false) + conv(32, 64, 3, 7 * 7, false) +
           conv(64, 64, 3, 7 * 7, false) + conv(32, 64, 1, 7 * 7, false) + dense(64, 10, false);
  }
  if (model == "transformer") {  // patch 7, dim 64, depth 4, mlp 128: 17 tokens (models/transformer.cpp)
    const double t = 17, d = 64, m = 128;
    const double block = 2 * t * d * 3 * d + 2 * t * d * d + 2 * 2 * t * t * d + 2 * 2 * t * d * m;  // forward
    return dense(49, 64, true) * 16 + 4 * 3 * block + dense(64, 10, false);
  }
  return 0.0;
}

double process_cpu_s() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

void bench_training(benchmark::State& state, const Options& o, const std::string& model, bool deterministic,
                    const std::string& strategy, Communicator& comm) {
  hpctrain::train::TrainOptions t;
  t.deterministic = deterministic;
  t.micro_shard = o.micro_shard;
  t.model = model_config(model);
  if (o.init_seed) t.model["seed"] = *o.init_seed;
  t.strategy = strategy;
  t.optimizer = o.optimizer;
  t.grad_dtype = o.grad_dtype;
  t.grad_error_feedback = o.error_feedback;
  t.data = o.data;
  t.global_batch = o.global_batch;
  t.lr = o.lr;
  t.momentum = o.momentum;
  t.seed = o.seed;
  t.parallel.algorithm = hpctrain::coll::parse_algorithm(o.algo, "algo");
  t.warmup_steps_for_throughput = o.warmup;
  t.quiet = true;
  t.log_every = 0;
  if (o.epochs > 0) {
    t.epochs = o.epochs;
    t.max_steps = o.max_steps;
    t.eval_data = o.eval_data;
  } else {
    // Every epoch has at least one step, so max_steps epochs always suffice; max_steps stops
    // exactly at warmup + steps whatever the data set's size.
    t.max_steps = o.warmup + o.steps;
    t.epochs = t.max_steps;
  }

  std::vector<double> rates;
  hpctrain::train::TrainResult last;
  std::int64_t measured_steps = 0;
  double cpu_util = 0;
  for (auto _ : state) {
    comm.barrier();  // outside the timed region
    const double cpu_before = process_cpu_s();
    last = hpctrain::train::run_training(t, comm);
    cpu_util = (process_cpu_s() - cpu_before) / std::max(last.seconds, 1e-12);
    measured_steps = last.steps - o.warmup;
    HPCTRAIN_REQUIRE(measured_steps > 0 && last.samples_per_s > 0,
                     "bench_train: no step after the " + std::to_string(o.warmup) + " warm-up steps");
    // run_training's throughput time is already the slowest rank's.
    const double samples = static_cast<double>(measured_steps * o.global_batch);
    state.SetIterationTime(samples / last.samples_per_s);
    rates.push_back(last.samples_per_s);
  }
  std::vector<double> sorted = rates;
  std::sort(sorted.begin(), sorted.end());
  const std::size_t n = sorted.size();
  const double rate = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  const double p = comm.size();
  state.counters["samples_per_s"] = benchmark::Counter(rate);
  state.counters["samples_per_s_best"] = benchmark::Counter(sorted.back());
  state.counters["samples_per_s_per_rank"] = benchmark::Counter(rate / p);
  state.counters["ranks"] = benchmark::Counter(p);
  state.counters["global_batch"] = benchmark::Counter(static_cast<double>(o.global_batch));
  state.counters["steps"] = benchmark::Counter(static_cast<double>(measured_steps));
  const double run_s = std::max(last.seconds, 1e-12);
  state.counters["compute_frac"] = benchmark::Counter(last.compute_s / run_s);
  state.counters["comm_frac"] = benchmark::Counter(last.comm_exposed_s / run_s);
  state.counters["data_frac"] = benchmark::Counter(last.data_wait_s / run_s);
  state.counters["cpu_util"] = benchmark::Counter(cpu_util);
  state.counters["final_loss"] = benchmark::Counter(last.final_train_loss);
  state.counters["deterministic"] = benchmark::Counter(deterministic ? 1 : 0);
  state.counters["optimizer_state_bytes"] = benchmark::Counter(static_cast<double>(last.memory.optimizer_state_bytes));
  state.counters["gradient_bytes"] = benchmark::Counter(static_cast<double>(last.memory.gradient_bytes));
  state.counters["parameter_bytes"] = benchmark::Counter(static_cast<double>(last.memory.parameter_bytes));
  state.counters["peak_rss_bytes"] = benchmark::Counter(static_cast<double>(last.memory.peak_rss_bytes));
  state.counters["parameters"] = benchmark::Counter(static_cast<double>(last.parameter_count));
  if (const double flop = train_flop_per_sample(model); flop > 0) {
    state.counters["gflop_per_s"] = benchmark::Counter(rate * flop * 1e-9);
  }
  if (last.eval.samples > 0) {
    state.counters["test_accuracy"] = benchmark::Counter(last.eval.accuracy);
    state.counters["test_loss"] = benchmark::Counter(last.eval.loss);
    state.counters["epochs"] = benchmark::Counter(static_cast<double>(last.epochs_completed));
  }
  state.SetLabel(model + " " + strategy + " " + o.optimizer + " grad_dtype=" + o.grad_dtype + (o.error_feedback ? " error_feedback" : "") + (deterministic ? " deterministic micro_shard=" + std::to_string(o.micro_shard) : "") + " P=" + std::to_string(comm.size()) + " B=" + std::to_string(o.global_batch) +
                 (o.epochs > 0 ? " epochs=" + std::to_string(o.epochs) +
                                     (o.max_steps > 0 ? " max_steps=" + std::to_string(o.max_steps) : "")
                               : " steps=" + std::to_string(o.steps)));
}

int run(int& argc, char** argv) {
  Options o = parse_options(argc, argv);
  Communicator comm(hpctrain::coll::make_mpi_transport(MPI_COMM_WORLD));
  if (o.data.empty()) {
    o.data = hpctrain::io::ensure_fashion_mnist("train", comm);
    if (o.epochs > 0 && o.eval_data.empty()) o.eval_data = hpctrain::io::ensure_fashion_mnist("test", comm);
  }
  for (const std::string& model : o.models) {
    const std::string model_name = fs::path(model).stem().string();
    for (const bool deterministic : o.deterministic) {
      for (const std::string& strategy : o.strategies) {
        const std::string name = "train/" + model_name + "/P:" + std::to_string(comm.size()) +
                                 (deterministic ? "/deterministic" : "") + (strategy == "ddp" ? "" : "/" + strategy) +
                                 (o.grad_dtype == "f32" ? "" : "/" + o.grad_dtype) + (o.error_feedback ? "/ef" : "");
        benchmark::RegisterBenchmark(name.c_str(), [&o, model, deterministic, strategy, &comm](benchmark::State& s) {
          bench_training(s, o, model, deterministic, strategy, comm);
        })
            ->Iterations(o.iters)
            ->UseManualTime()
            ->Unit(benchmark::kMillisecond);
      }
    }
  }
  return hpctrain::bench::run_benchmarks(argc, argv, MPI_COMM_WORLD) ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  hpctrain::choose_openblas_kernels(argv);  // before anything uses BLAS
  hpctrain::Environment env(argc, argv);  // MPI_Init_thread, then Kokkos; the reverse at exit
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    hpctrain::abort_job(e);  // one clear line, then MPI_Abort: no rank hangs
  }
}
