// gpu_check: the measured checks of scripts/gpu-check.sh (issue 23), one JSON record per check.
//
// On a CUDA build it runs on the GPU: the compute core's gemm against a float64 reference and
// against cuBLAS called directly, MLP and CNN training steps on synthetic data (the loss must
// fall; samples/s), and the collectives' device-buffer path (the staging pipeline through the
// loopback transport, 2 and 4 ranks as threads sharing the GPU) against a host reference, with
// its bandwidth against the pinned-memory copy bound, and the `nccl` pass-through on one rank when
// built with NCCL. On a host build the same program runs the
// same checks on the CPU, with the collectives' stand-in device space and OpenBLAS as the gemm
// peer (the rehearsal the ordinary test suite runs, so the script's first GPU run finds a driver
// that works). It needs neither MPI nor HDF5: it builds with HPCTRAIN_ENABLE_MPI=OFF.
//
//   gpu_check --json FILE [--quick] [--steps N] [--only gemm,train,allreduce]
//
// Each record: {"name", "passed", "figures": {...}, "units": {...}, "detail"}; a check that
// cannot run in this build says why in "skipped" and has passed = null. Exit 0 when every check
// that ran passed, 1 when one failed, 2 on bad arguments.

#include "hpctrain/base/error.hpp"
#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/collectives/device_memory.hpp"
#include "hpctrain/collectives/loopback_transport.hpp"
#include "hpctrain/collectives/stand_in_device.hpp"
#include "hpctrain/core/environment.hpp"
#include "hpctrain/core/gemm.hpp"
#include "hpctrain/core/loss.hpp"
#include "hpctrain/core/optimizer.hpp"
#include "hpctrain/core/tensor.hpp"
#include "hpctrain/models/registry.hpp"

#include <Kokkos_Core.hpp>
#include <nlohmann/json.hpp>

#if defined(HPCTRAIN_ENABLE_CUDA)
#include <cublas_v2.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

using nlohmann::json;
using hpctrain::core::ExecSpace;
using hpctrain::core::MemSpace;
using Clock = std::chrono::steady_clock;

#if defined(HPCTRAIN_ENABLE_CUDA)
constexpr bool kOnDevice = true;
#else
constexpr bool kOnDevice = false;
#endif

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Options {
  std::string json_path;
  bool quick = false;
  int steps = 30;
  std::set<std::string> only;
};

void usage(std::ostream& os) {
  os << "usage: gpu_check --json FILE [--quick] [--steps N] [--only gemm,train,allreduce]\n"
        "  Runs the device checks of scripts/gpu-check.sh and writes one JSON record per check.\n"
        "  --json FILE  where the records go (a JSON array); required\n"
        "  --quick      small sizes (seconds on a CPU): the rehearsal the test suite runs\n"
        "  --steps N    timed training steps per model (default 30; at least 10)\n"
        "  --only LIST  run only these groups (comma-separated: gemm, train, allreduce)\n"
        "Exit: 0 every check that ran passed, 1 a check failed, 2 bad arguments.\n";
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      HPCTRAIN_REQUIRE(i + 1 < argc, "gpu_check: " + a + " needs a value");
      return argv[++i];
    };
    if (a == "--json") {
      o.json_path = value();
    } else if (a == "--quick") {
      o.quick = true;
    } else if (a == "--steps") {
      const std::string v = value();
      try {
        o.steps = std::stoi(v);
      } catch (const std::exception&) {
        HPCTRAIN_FAIL("gpu_check: --steps '" + v + "' is not a number");
      }
      HPCTRAIN_REQUIRE(o.steps >= 10, "gpu_check: --steps " + v + " is below 10 (the loss is compared over 5-step windows)");
    } else if (a == "--only") {
      std::stringstream ss(value());
      std::string g;
      while (std::getline(ss, g, ',')) {
        HPCTRAIN_REQUIRE(g == "gemm" || g == "train" || g == "allreduce",
                         "gpu_check: --only group '" + g + "' is not one of gemm, train, allreduce");
        o.only.insert(g);
      }
    } else if (a == "--help" || a == "-h") {
      usage(std::cout);
      std::exit(0);
    } else {
      HPCTRAIN_FAIL("gpu_check: unknown argument '" + a + "' (--help lists them)");
    }
  }
  HPCTRAIN_REQUIRE(!o.json_path.empty(), "gpu_check: --json FILE is required (--help lists the arguments)");
  return o;
}

/// One check's record, printed as it completes (progress on the log) and kept for the file.
struct Records {
  json all = json::array();
  bool failed = false;
  void add(json r) {
    if (r.contains("passed") && r["passed"].is_boolean() && !r["passed"].get<bool>()) failed = true;
    std::cout << "gpu_check: " << r.dump() << std::endl;
    all.push_back(std::move(r));
  }
};

json record(const std::string& name, bool passed) { return json{{"name", name}, {"passed", passed}, {"figures", json::object()}, {"units", json::object()}}; }
json skipped(const std::string& name, const std::string& why) {
  return json{{"name", name}, {"passed", nullptr}, {"skipped", why}};
}
void figure(json& r, const std::string& key, double v, const std::string& unit) {
  r["figures"][key] = v;
  r["units"][key] = unit;
}

// ---- gemm ------------------------------------------------------------------------------------

using HostMatrix = Kokkos::View<float**, Kokkos::LayoutRight, Kokkos::HostSpace>;
using DevMatrix = Kokkos::View<float**, Kokkos::LayoutRight, MemSpace>;

/// The compute core's gemm takes unmanaged row-major windows.
hpctrain::core::Matrix<float> window(const DevMatrix& x) {
  return hpctrain::core::Matrix<float>(x.data(), x.extent(0), x.extent(1));
}

HostMatrix random_host(const char* label, std::int64_t r, std::int64_t c, std::uint32_t seed) {
  HostMatrix h(std::string(label), static_cast<std::size_t>(r), static_cast<std::size_t>(c));
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1.0F, 1.0F);
  for (std::int64_t i = 0; i < r; ++i)
    for (std::int64_t j = 0; j < c; ++j) h(i, j) = u(gen);
  return h;
}

/// The vendor's sgemm on the same row-major operands (C = A B), called directly: cuBLAS on CUDA
/// builds (column-major: C^T = B^T A^T), the host BLAS otherwise; kVendor names it, or is null
/// where the build has none.
#if defined(HPCTRAIN_ENABLE_CUDA)
struct CublasHandle {
  cublasHandle_t h = nullptr;
  CublasHandle() {
    HPCTRAIN_REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS, "gpu_check: cublasCreate failed");
    cublasSetStream(h, ExecSpace().cuda_stream());
  }
  ~CublasHandle() { cublasDestroy(h); }
};
constexpr const char* kVendor = "cublasSgemm";
void vendor_sgemm(const DevMatrix& a, const DevMatrix& b, const DevMatrix& c) {
  static CublasHandle handle;
  const int m = static_cast<int>(a.extent(0)), k = static_cast<int>(a.extent(1)), n = static_cast<int>(b.extent(1));
  const float one = 1.0F, zero = 0.0F;
  const cublasStatus_t s = cublasSgemm(handle.h, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, b.data(), n, a.data(), k,
                                       &zero, c.data(), n);
  HPCTRAIN_REQUIRE(s == CUBLAS_STATUS_SUCCESS, "gpu_check: cublasSgemm failed with status " + std::to_string(static_cast<int>(s)));
}
#elif defined(HPCTRAIN_GPU_CHECK_HOST_BLAS)
extern "C" void sgemm_(const char* ta, const char* tb, const int* m, const int* n, const int* k, const float* alpha,
                       const float* a, const int* lda, const float* b, const int* ldb, const float* beta, float* c,
                       const int* ldc);
constexpr const char* kVendor = "sgemm_ (host BLAS)";
void vendor_sgemm(const DevMatrix& a, const DevMatrix& b, const DevMatrix& c) {
  const int m = static_cast<int>(a.extent(0)), k = static_cast<int>(a.extent(1)), n = static_cast<int>(b.extent(1));
  const float one = 1.0F, zero = 0.0F;
  sgemm_("N", "N", &n, &m, &k, &one, b.data(), &n, a.data(), &k, &zero, c.data(), &n);
}
#else
constexpr const char* kVendor = nullptr;
void vendor_sgemm(const DevMatrix&, const DevMatrix&, const DevMatrix&) {}
#endif

void check_gemm_correct(Records& out) {
  // Odd shapes: no size is a multiple of a vendor tile.
  const std::int64_t m = 257, k = 129, n = 65;
  const HostMatrix ha = random_host("a", m, k, 1), hb = random_host("b", k, n, 2);
  DevMatrix a("a", m, k), b("b", k, n), c("c", m, n);
  Kokkos::deep_copy(a, ha);
  Kokkos::deep_copy(b, hb);
  hpctrain::core::gemm(hpctrain::core::Trans::no, hpctrain::core::Trans::no, 1.0F, window(a), window(b), 0.0F, window(c));
  const auto hc = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), c);
  double worst = 0.0;
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double ref = 0.0, mag = 0.0;
      for (std::int64_t p = 0; p < k; ++p) {
        ref += static_cast<double>(ha(i, p)) * hb(p, j);
        mag += std::fabs(static_cast<double>(ha(i, p)) * hb(p, j));
      }
      worst = std::max(worst, std::fabs(hc(i, j) - ref) / std::max(mag, 1e-30));
    }
  // float32 accumulation over k = 129 terms: |error| <= k * 2^-24 * sum |a b| (tensor cores'
  // TF32 would give ~2^-11 and fail this, which is the point: fp32 gemm must stay fp32).
  const double bound = static_cast<double>(k) * std::ldexp(1.0, -24);
  json r = record("gemm.correct", worst <= bound);
  figure(r, "max_error_over_sum_abs", worst, "relative");
  figure(r, "bound", bound, "relative");
  r["detail"] = "257x129 * 129x65 float32 against a float64 reference";
  out.add(std::move(r));
}

void check_gemm_speed(Records& out, bool quick) {
  struct Shape {
    const char* name;
    std::int64_t m, k, n;
  };
  const std::vector<Shape> shapes =
      quick ? std::vector<Shape>{{"square256", 256, 256, 256}, {"mlp_fc1_b128", 128, 784, 512}}
      : kOnDevice ? std::vector<Shape>{{"square4096", 4096, 4096, 4096}, {"square8192", 8192, 8192, 8192},
                                       {"mlp_fc1_b128", 128, 784, 512}, {"cnn_fc_b128", 128, 3136, 256}}
                  : std::vector<Shape>{{"square1024", 1024, 1024, 1024}, {"mlp_fc1_b128", 128, 784, 512}};
  for (const Shape& s : shapes) {
    const std::string name = std::string("gemm.vs_vendor.") + s.name;
    if (kVendor == nullptr) {
      out.add(skipped(name, "no vendor sgemm to call directly in this build"));
      continue;
    }
    DevMatrix a("a", s.m, s.k), b("b", s.k, s.n), c("c", s.m, s.n), cv("cv", s.m, s.n);
    Kokkos::deep_copy(a, random_host("a", s.m, s.k, 3));
    Kokkos::deep_copy(b, random_host("b", s.k, s.n, 4));
    const double flop = 2.0 * static_cast<double>(s.m) * s.k * s.n;
    // Enough repetitions for ~0.2 s at 50 TFLOP/s on a GPU / 50 GFLOP/s on a core; at least 3.
    const double rate_guess = kOnDevice ? 5e13 : 5e10;
    const int reps = std::max(3, static_cast<int>(std::min(200.0, (quick ? 0.02 : 0.2) * rate_guess / flop)));
    auto time_it = [&](const std::function<void()>& f) {
      f();
      Kokkos::fence();
      double best = 1e30;
      for (int round = 0; round < 3; ++round) {
        const auto t0 = Clock::now();
        for (int i = 0; i < reps; ++i) f();
        Kokkos::fence();
        best = std::min(best, seconds_since(t0) / reps);
      }
      return best;
    };
    const double t_ours = time_it([&] {
      hpctrain::core::gemm(hpctrain::core::Trans::no, hpctrain::core::Trans::no, 1.0F, window(a), window(b), 0.0F, window(c));
    });
    const double t_vendor = time_it([&] { vendor_sgemm(a, b, cv); });
    // Same operands, same library underneath: the products must agree closely (not bitwise:
    // the two calls may pick different kernels).
    const auto h1 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), c);
    const auto h2 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), cv);
    double worst = 0.0;
    for (std::int64_t i = 0; i < s.m; ++i)
      for (std::int64_t j = 0; j < s.n; ++j)
        worst = std::max(worst, static_cast<double>(std::fabs(h1(i, j) - h2(i, j))) / std::sqrt(static_cast<double>(s.k)));
    const double ratio = t_vendor / t_ours;
    json r = record(name, worst < 1e-3);
    figure(r, "hpctrain_gflop_per_s", flop / t_ours / 1e9, "GFLOP/s");
    figure(r, "vendor_gflop_per_s", flop / t_vendor / 1e9, "GFLOP/s");
    figure(r, "ratio_to_vendor", ratio, "x");
    figure(r, "max_abs_difference_over_sqrt_k", worst, "1");
    r["vendor"] = kVendor;
    r["goal"] = json{{"what", "hpctrain gemm >= 0.9x the vendor's"}, {"met", ratio >= 0.9}};
    r["detail"] = std::to_string(s.m) + "x" + std::to_string(s.k) + " * " + std::to_string(s.k) + "x" +
                  std::to_string(s.n) + " float32, best of 3 rounds of " + std::to_string(reps);
    out.add(std::move(r));
  }
}

// ---- training steps --------------------------------------------------------------------------

/// A learnable synthetic task: inputs uniform in [-1, 1], the label the argmax of a fixed random
/// linear teacher. Batches are made once and cycled.
struct SyntheticData {
  std::vector<hpctrain::core::Tensor<float>> x;
  std::vector<hpctrain::core::Labels> y;
};

SyntheticData make_data(const hpctrain::core::Shape& sample, std::int64_t classes, std::int64_t batch, int batches) {
  const std::int64_t features = hpctrain::core::shape_size(sample);
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> u(-1.0F, 1.0F);
  std::vector<float> teacher(static_cast<std::size_t>(features * classes));
  for (float& w : teacher) w = u(gen);
  SyntheticData d;
  hpctrain::core::Shape shape{batch};
  shape.insert(shape.end(), sample.begin(), sample.end());
  for (int b = 0; b < batches; ++b) {
    auto x = hpctrain::core::make_tensor<float>("x", shape);
    hpctrain::core::Labels y("y", static_cast<std::size_t>(batch));
    auto hx = Kokkos::create_mirror_view(x.data);
    auto hy = Kokkos::create_mirror_view(y);
    for (std::int64_t i = 0; i < batch; ++i) {
      std::vector<double> score(static_cast<std::size_t>(classes), 0.0);
      for (std::int64_t f = 0; f < features; ++f) {
        const float v = u(gen);
        hx(i * features + f) = v;
        for (std::int64_t c = 0; c < classes; ++c) score[static_cast<std::size_t>(c)] += v * teacher[static_cast<std::size_t>(c * features + f)];
      }
      hy(i) = static_cast<std::int32_t>(std::max_element(score.begin(), score.end()) - score.begin());
    }
    Kokkos::deep_copy(x.data, hx);
    Kokkos::deep_copy(y, hy);
    d.x.push_back(x);
    d.y.push_back(y);
  }
  return d;
}

void check_training(Records& out, const std::string& model_name, int steps, bool quick) {
  const std::string name = "train." + model_name;
  const std::int64_t batch = 128;
  json config{{"name", model_name}, {"seed", 1}};
  auto model = hpctrain::models::build_model<float>(config);
  const auto classes = model->output_shape().back();
  const int warmup = quick ? 2 : 5;
  const int timed = quick ? std::min(steps, 10) : steps;
  const auto data = make_data(model->input_shape(), classes, batch, 8);
  hpctrain::core::SgdOptions so;
  so.lr = 0.05;
  so.momentum = 0.9;
  hpctrain::core::Sgd<float> sgd(so);
  hpctrain::core::Tensor<float> dlogits;
  std::vector<double> losses;
  auto step = [&](int i) {
    const auto& x = data.x[static_cast<std::size_t>(i % 8)];
    const auto& y = data.y[static_cast<std::size_t>(i % 8)];
    const auto logits = model->forward(x, true);
    hpctrain::core::ensure_shape(dlogits, "dlogits", logits.shape);
    losses.push_back(hpctrain::core::softmax_cross_entropy(logits, y, batch, dlogits));
    model->zero_gradients();
    model->backward(dlogits);
    sgd.step(model->parameter_buffer(), model->gradient_buffer());
  };
  for (int i = 0; i < warmup; ++i) step(i);
  Kokkos::fence();
  const auto t0 = Clock::now();
  for (int i = warmup; i < warmup + timed; ++i) step(i);
  Kokkos::fence();
  const double t = seconds_since(t0);
  const auto mean = [&](std::size_t from, std::size_t n) {
    double s = 0;
    for (std::size_t i = from; i < from + n; ++i) s += losses[i];
    return s / static_cast<double>(n);
  };
  const double first = mean(0, 5), last = mean(losses.size() - 5, 5);
  const bool finite = std::all_of(losses.begin(), losses.end(), [](double l) { return std::isfinite(l); });
  json r = record(name, finite && last < first);
  figure(r, "samples_per_s", static_cast<double>(batch) * timed / t, "samples/s");
  figure(r, "step_ms", 1e3 * t / timed, "ms");
  figure(r, "loss_first5", first, "nats");
  figure(r, "loss_last5", last, "nats");
  r["detail"] = model_name + " (registry defaults), batch 128, SGD lr 0.05 momentum 0.9, synthetic teacher data, " +
                std::to_string(warmup) + " warm-up + " + std::to_string(timed) + " timed steps; the loss must fall";
  out.add(std::move(r));
}

// ---- device all-reduce -----------------------------------------------------------------------

/// Device memory for one loopback rank: the CUDA space when built with it, else the stand-in.
struct RankDevice {
  std::shared_ptr<hpctrain::coll::DeviceMemory> memory;
  std::function<void*(std::size_t)> allocate;
  std::function<void(void*)> deallocate;
};

RankDevice make_rank_device() {
  RankDevice d;
#if defined(HPCTRAIN_ENABLE_CUDA) && defined(HPCTRAIN_HAVE_CUDA_COLLECTIVES)
  int device = 0;
  cudaGetDevice(&device);
  d.memory = hpctrain::coll::make_cuda_device_memory(device, false);
  d.allocate = [](std::size_t bytes) { return Kokkos::kokkos_malloc<MemSpace>("gpu_check", bytes); };
  d.deallocate = [](void* p) { Kokkos::kokkos_free<MemSpace>(p); };
#else
  auto stand_in = std::make_shared<hpctrain::coll::StandInDevice>();
  d.memory = stand_in;
  d.allocate = [stand_in](std::size_t bytes) { return stand_in->allocate(bytes); };
  d.deallocate = [stand_in](void* p) { stand_in->deallocate(p); };
#endif
  return d;
}

const char* device_space_name() {
#if defined(HPCTRAIN_ENABLE_CUDA) && defined(HPCTRAIN_HAVE_CUDA_COLLECTIVES)
  return "cuda";
#else
  return "stand-in (host memory behind explicit copies)";
#endif
}

void check_allreduce(Records& out, bool quick) {
  const std::size_t count = quick ? (std::size_t{1} << 18) : (kOnDevice ? (std::size_t{64} << 20) / 4 : (std::size_t{16} << 20) / 4);
  const std::size_t bytes = count * sizeof(float);
  const int reps = quick ? 2 : 5;
  for (const int ranks : {2, 4}) {
    const std::string name = "allreduce.device.p" + std::to_string(ranks);
    double t_allreduce = 0.0, t_bound = 0.0;
    std::vector<double> worst(static_cast<std::size_t>(ranks), 0.0);
    hpctrain::coll::run_loopback_ranks(ranks, hpctrain::coll::Tuning{}, [&](hpctrain::coll::Communicator& comm) {
      const int rank = comm.rank();
      RankDevice dev = make_rank_device();
      comm.set_device_memory(dev.memory);
      float token = 1.0F;
      auto barrier = [&] { comm.allreduce(&token, 1, hpctrain::coll::ReduceOp::sum); };
      // Exact in float32: multiples of 0.25 below 2^10, so every order of summation agrees.
      std::vector<float> in(count), result(count);
      for (std::size_t i = 0; i < count; ++i) in[i] = 0.25F * static_cast<float>((rank + 1) * (static_cast<int>(i % 13) + 1));
      void* send = dev.allocate(bytes);
      void* recv = dev.allocate(bytes);
      dev.memory->copy_to_device(send, in.data(), bytes, 0);
      dev.memory->synchronize(0);
      comm.allreduce(send, recv, count, hpctrain::coll::DataType::f32, hpctrain::coll::ReduceOp::sum,
                     hpctrain::coll::MemorySpace::device);  // warm-up: staging buffers, tuning
      barrier();
      auto t0 = Clock::now();
      for (int i = 0; i < reps; ++i)
        comm.allreduce(send, recv, count, hpctrain::coll::DataType::f32, hpctrain::coll::ReduceOp::sum,
                       hpctrain::coll::MemorySpace::device);
      barrier();
      if (rank == 0) t_allreduce = seconds_since(t0) / reps;
      dev.memory->copy_to_host(result.data(), recv, bytes, 0);
      dev.memory->synchronize(0);
      const float ranks_sum = 0.25F * static_cast<float>(ranks * (ranks + 1) / 2);
      double w = 0.0;
      for (std::size_t i = 0; i < count; ++i)
        w = std::max(w, static_cast<double>(std::fabs(result[i] - ranks_sum * static_cast<float>(i % 13 + 1))));
      worst[static_cast<std::size_t>(rank)] = w;
      // The pinned-copy bound: every rank's vector copied down and up once, both directions at
      // once on two streams, all ranks at once (the staging pipeline moves exactly this; it
      // cannot take less time than these copies alone).
      auto down = dev.memory->allocate_staging(bytes);
      auto up = dev.memory->allocate_staging(bytes);
      double best = 1e30;
      for (int round = 0; round < 3; ++round) {
        barrier();
        t0 = Clock::now();
        dev.memory->copy_to_host(down.get(), send, bytes, 0);
        dev.memory->copy_to_device(recv, up.get(), bytes, 1);
        dev.memory->synchronize(0);
        dev.memory->synchronize(1);
        barrier();
        best = std::min(best, seconds_since(t0));
      }
      if (rank == 0) t_bound = best;
      comm.set_device_memory(nullptr);
      dev.deallocate(send);
      dev.deallocate(recv);
    });
    const double w = *std::max_element(worst.begin(), worst.end());
    const double frac = t_bound / t_allreduce;
    json r = record(name, w == 0.0);
    figure(r, "vector_bytes", static_cast<double>(bytes), "B");
    figure(r, "time_ms", 1e3 * t_allreduce, "ms");
    figure(r, "algbw_gb_per_s", static_cast<double>(bytes) / t_allreduce / 1e9, "GB/s");
    figure(r, "busbw_gb_per_s", static_cast<double>(bytes) / t_allreduce / 1e9 * 2.0 * (ranks - 1) / ranks, "GB/s");
    figure(r, "pinned_copy_bound_ms", 1e3 * t_bound, "ms");
    figure(r, "fraction_of_pinned_copy_bound", frac, "1");
    figure(r, "max_abs_error", w, "1");
    r["device_space"] = device_space_name();
    r["goal"] = json{{"what", "time >= 0.8 of the pinned-copy bound's speed"}, {"met", frac >= 0.8}};
    r["detail"] = std::to_string(ranks) + " loopback ranks (threads) on one device, float32 sum out of place, algorithm "
                  "automatic, mean of " + std::to_string(reps) + "; exact against the host reference";
    out.add(std::move(r));
  }
}

/// The `nccl` pass-through on one rank (NCCL allows one rank per GPU in a communicator, so the
/// loopback ranks sharing the GPU cannot form a larger one): ncclAllReduce on device buffers, the
/// result read back and compared with the input, and its time.
void check_nccl(Records& out, bool quick) {
#if defined(HPCTRAIN_HAVE_NCCL) && defined(HPCTRAIN_ENABLE_CUDA) && defined(HPCTRAIN_HAVE_CUDA_COLLECTIVES)
  const std::size_t count = quick ? (std::size_t{1} << 18) : (std::size_t{64} << 20) / 4;
  const std::size_t bytes = count * sizeof(float);
  const int reps = 5;
  double t = 0.0, worst = 0.0;
  hpctrain::coll::run_loopback_ranks(1, hpctrain::coll::Tuning{}, [&](hpctrain::coll::Communicator& comm) {
    RankDevice dev = make_rank_device();
    std::vector<float> in(count), result(count);
    for (std::size_t i = 0; i < count; ++i) in[i] = 0.5F * static_cast<float>(i % 101);
    void* send = dev.allocate(bytes);
    void* recv = dev.allocate(bytes);
    dev.memory->copy_to_device(send, in.data(), bytes, 0);
    dev.memory->synchronize(0);
    auto reduce = [&] {
      comm.allreduce(send, recv, count, hpctrain::coll::DataType::f32, hpctrain::coll::ReduceOp::sum,
                     hpctrain::coll::MemorySpace::device, hpctrain::coll::Algorithm::nccl);
    };
    reduce();  // creates the NCCL communicator
    const auto t0 = Clock::now();
    for (int i = 0; i < reps; ++i) reduce();
    t = seconds_since(t0) / reps;
    dev.memory->copy_to_host(result.data(), recv, bytes, 0);
    dev.memory->synchronize(0);
    for (std::size_t i = 0; i < count; ++i) worst = std::max(worst, static_cast<double>(std::fabs(result[i] - in[i])));
    dev.deallocate(send);
    dev.deallocate(recv);
  });
  json r = record("allreduce.nccl.p1", worst == 0.0);
  figure(r, "vector_bytes", static_cast<double>(bytes), "B");
  figure(r, "time_ms", 1e3 * t, "ms");
  figure(r, "algbw_gb_per_s", static_cast<double>(bytes) / t / 1e9, "GB/s");
  figure(r, "max_abs_error", worst, "1");
  r["detail"] = "Algorithm::nccl on one loopback rank (ncclAllReduce, float32 sum, out of place), mean of 5";
  out.add(std::move(r));
#else
  (void)quick;
  out.add(skipped("allreduce.nccl.p1", "this build has no `nccl` algorithm (HPCTRAIN_ENABLE_NCCL with the CUDA collectives)"));
#endif
}

}  // namespace

int main(int argc, char** argv) {
  try {
    hpctrain::Environment env(argc, argv);
    const Options o = parse(argc, argv);
    Records out;
    auto want = [&](const char* g) { return o.only.empty() || o.only.count(g) > 0; };
    json env_record = record("environment", true);
    env_record["execution_space"] = ExecSpace::name();
    env_record["device_space"] = device_space_name();
    env_record["gemm_backend"] = hpctrain::core::gemm_backend_name(hpctrain::core::gemm_backend());
    out.add(std::move(env_record));
    if (want("gemm")) {
      check_gemm_correct(out);
      check_gemm_speed(out, o.quick);
    }
    if (want("train")) {
      check_training(out, "mlp", o.steps, o.quick);
      check_training(out, "cnn", o.steps, o.quick);
    }
    if (want("allreduce")) {
      check_allreduce(out, o.quick);
      check_nccl(out, o.quick);
    }
    std::ofstream f(o.json_path);
    HPCTRAIN_REQUIRE(f.good(), "gpu_check: cannot write '" + o.json_path + "'");
    f << out.all.dump(2) << "\n";
    HPCTRAIN_REQUIRE(f.good(), "gpu_check: writing '" + o.json_path + "' failed");
    return out.failed ? 1 : 0;
  } catch (const std::exception& e) {
    std::cerr << "gpu_check: " << e.what() << "\n";
    return 2;
  }
}
