// bench_predict: inference throughput (samples/s) of `hpctrain predict`'s forward pass for the
// built-in models, at the launcher's rank count. See docs/serving.md.
//
//   mpirun -n P build/bin/bench_predict [--models=mlp,cnn] [--samples=10000] [--batch=256]
//          [--iters=5] [Google Benchmark flags]
//
// One benchmark per model, `predict/<model>/P:<ranks>`. Setup (untimed): the model is built
// with its registry seed, written as a checkpoint by all ranks (io::write_checkpoint) and read
// back through serve::InferenceModel (verification, parameter checksum, gradients released) —
// the path `hpctrain predict` takes; `samples` inputs in [0, 1] are drawn once. One iteration =
// every sample through the forward pass in whole batches of `batch`, rank r taking the
// contiguous run of batches [r B / P, (r + 1) B / P) as predict does (normalisation, forward,
// softmax and argmax included; reading the HDF5 input and writing the output are not: this
// measures compute). Time = the slowest rank's, a barrier before each iteration.
//
// Counters: samples_per_s (median iteration), samples_per_s_best, ranks, batch, threads (compute
// threads per rank), gflop_per_s (forward FLOPs: mlp 0.80 MFLOP/sample, cnn 22.9).
// scripts/compare-torch-predict.sh runs this next to PyTorch's torch.no_grad() inference.

#include <Kokkos_Core.hpp>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "hpctrain/base/error.hpp"
#include "hpctrain/collectives/agreement.hpp"
#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/core/environment.hpp"
#include "hpctrain/core/tensor.hpp"
#include "hpctrain/io/checkpoint.hpp"
#include "hpctrain/models/registry.hpp"
#include "hpctrain/serve/inference_model.hpp"
#include "hpctrain/train/trainer.hpp"
#include "mpi_benchmark.hpp"

namespace {

using hpctrain::coll::Communicator;

struct Options {
  std::vector<std::string> models{"mlp", "cnn"};
  long long samples = 10000, batch = 256, iters = 5;
};

Options parse_options(int& argc, char** argv) {
  using hpctrain::bench::parse_count;
  using hpctrain::bench::take_flag;
  Options o;
  if (auto v = take_flag(argc, argv, "models")) {
    o.models.clear();
    std::stringstream ss(*v);
    for (std::string m; std::getline(ss, m, ',');) o.models.push_back(m);
  }
  if (auto v = take_flag(argc, argv, "samples")) o.samples = parse_count(*v, "--samples", 1);
  if (auto v = take_flag(argc, argv, "batch")) o.batch = parse_count(*v, "--batch", 1);
  if (auto v = take_flag(argc, argv, "iters")) o.iters = parse_count(*v, "--iters", 1);
  return o;
}

double forward_flop_per_sample(const std::string& model) {
  if (model == "mlp") return 2.0 * (784 * 512 + 512 * 256 + 256 * 10);
  if (model == "cnn") return 2.0 * (28 * 28 * 32 * 25 + 14 * 14 * 64 * 32 * 25 + 3136 * 256 + 256 * 10);
  return 0.0;
}

/// A checkpoint of the freshly initialised model (all ranks write), its verified source.
hpctrain::serve::CheckpointSource write_model_checkpoint(Communicator& comm, const std::string& model_name,
                                                         const std::string& dir) {
  const nlohmann::json config{{"name", model_name}};
  auto model = hpctrain::models::build_model<float>(config);
  const std::vector<float> params = hpctrain::core::to_host(model->parameter_buffer());
  std::vector<hpctrain::io::CheckpointTensor> tensors;
  for (const auto& p : model->parameter_info()) tensors.push_back({"params/" + p.name, p.shape, params.data() + p.offset});
  const nlohmann::json meta{{"model", config},
                            {"parameter_checksum", hpctrain::train::parameter_checksum(params.data(), params.size())}};
  hpctrain::io::write_checkpoint(comm, dir, 1, meta, tensors, 1);
  comm.barrier();
  return hpctrain::serve::resolve_checkpoint(dir);
}

void bench_predict(benchmark::State& state, const Options& o, const std::string& model_name, Communicator& comm) {
  const std::string dir = (std::filesystem::temp_directory_path() / ("bench_predict_" + model_name + "_" +
                                                                      hpctrain::coll::broadcast_string(comm, std::to_string(::getpid()))))
                              .string();
  hpctrain::serve::InferenceModel model(write_model_checkpoint(comm, model_name, dir));
  const long long batches = (o.samples + o.batch - 1) / o.batch;
  const long long first = batches * comm.rank() / comm.size(), end = batches * (comm.rank() + 1) / comm.size();
  std::vector<float> u(static_cast<std::size_t>(o.batch * model.input_size()));
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  for (float& x : u) x = uniform(rng);
  std::vector<float> p(static_cast<std::size_t>(o.batch * model.classes()));
  std::vector<std::int32_t> y(static_cast<std::size_t>(o.batch));
  const auto times = hpctrain::bench::timed_loop(state, MPI_COMM_WORLD, [&] {
    for (long long b = first; b < end; ++b) {
      const long long rows = std::min(o.batch, o.samples - b * o.batch);
      model.predict_raw(u.data(), rows, p.data(), y.data());
    }
    Kokkos::fence();
  });
  std::vector<double> rates;
  for (double t : times) rates.push_back(static_cast<double>(o.samples) / std::max(t, 1e-12));
  std::sort(rates.begin(), rates.end());
  const std::size_t n = rates.size();
  const double rate = n % 2 ? rates[n / 2] : 0.5 * (rates[n / 2 - 1] + rates[n / 2]);
  state.counters["samples_per_s"] = benchmark::Counter(rate);
  state.counters["samples_per_s_best"] = benchmark::Counter(rates.back());
  state.counters["ranks"] = benchmark::Counter(comm.size());
  state.counters["batch"] = benchmark::Counter(static_cast<double>(o.batch));
  state.counters["threads"] = benchmark::Counter(hpctrain::compute_threads().per_rank);
  state.counters["gflop_per_s"] = benchmark::Counter(rate * forward_flop_per_sample(model_name) * 1e-9);
  state.SetLabel(model_name + " P=" + std::to_string(comm.size()) + " batch=" + std::to_string(o.batch) +
                 " samples=" + std::to_string(o.samples));
  comm.barrier();
  if (comm.rank() == 0) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
}

int run(int& argc, char** argv) {
  const Options o = parse_options(argc, argv);
  Communicator comm(hpctrain::coll::make_mpi_transport(MPI_COMM_WORLD));
  for (const std::string& model : o.models) {
    const std::string name = "predict/" + model + "/P:" + std::to_string(comm.size());
    benchmark::RegisterBenchmark(name.c_str(), [&o, model, &comm](benchmark::State& s) { bench_predict(s, o, model, comm); })
        ->Iterations(o.iters)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }
  return hpctrain::bench::run_benchmarks(argc, argv, MPI_COMM_WORLD) ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  hpctrain::choose_openblas_kernels(argv);  // before anything uses BLAS
  hpctrain::Environment env(argc, argv);
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    hpctrain::abort_job(e);
  }
}
