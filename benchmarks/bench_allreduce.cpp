// bench_allreduce: hpctrain's all-reduce algorithms next to MPI_Allreduce, nccl-tests style.
//
//   mpirun -n P build/bin/bench_allreduce [--min_bytes=8] [--max_bytes=256M] [--step=2]
//          [--iters=N] [--warmup=N] [--algorithms=ring,tree,recursive_doubling,rabenseifner,shm,hierarchical,auto,mpi] [--transports=mpi,ucx]
//          [Google Benchmark flags]
//
// One benchmark per (algorithm, transport, size), named `allreduce/<column>/<bytes>` (Google
// Benchmark appends `/iterations:N/manual_time`), float32 sum, out of place. The default
// --algorithms is every algorithm: ring, tree, recursive_doubling, rabenseifner, shm,
// hierarchical, auto (Algorithm::automatic, the cost model's pick) and mpi (MPI_Allreduce).
// The column is the algorithm's name over the MPI transport ("ring") and
// `<algorithm>@<transport>` over another ("ring@ucx"); `mpi` (MPI_Allreduce) always runs on MPI,
// whatever --transports says.
// --transports defaults to HPCTRAIN_TRANSPORT (mpi when unset), so
// `HPCTRAIN_TRANSPORT=ucx mpirun -n 2 bench_allreduce` puts ring@ucx next to MPI_Allreduce. Every rank runs the same
// fixed number of iterations; each iteration is barrier (untimed) -> MPI_Wtime -> allreduce ->
// MPI_Wtime, and its time is the slowest rank's. Counters follow nccl-tests:
//   algbw = bytes / time (GB/s, 1e9; time = the median iteration), busbw = algbw * 2(p-1)/p,
//   wrong = mismatching elements of the last iteration summed over ranks (inputs are small
//   integers, so sums are exact).
// The bound (docs/benchmarks.md): at startup, in the same run, every rank copies 64 MiB with
// memcpy at the same time (best of 5); the slowest rank's rate is `copy_GBps` (B, bytes copied
// per second per rank with all ranks copying). An all-reduce on one node must at least read
// every rank's input and write every rank's output once: p·n bytes read and p·n written, the
// traffic of p copies of n bytes, so it takes at least n / B and busbw <= B·2(p-1)/p =
// `bound_GBps`. Every benchmark reports copy_GBps, bound_GBps and `busbw_over_bound` =
// busbw / bound_GBps (<= 1 for vectors well beyond the caches; over several nodes the network,
// not this bound, limits).
// Rank 0 prints an nccl-tests-like table at the end (stdout with the console format, stderr
// when --benchmark_format is json/csv so stdout stays machine-readable).
// Knobs: flags above, or HPCTRAIN_BENCH_{MIN_BYTES,MAX_BYTES,STEP,ITERS,WARMUP,ALGORITHMS,
// TRANSPORTS};
// the collectives' own HPCTRAIN_* tuning variables (Tuning::from_environment, including
// HPCTRAIN_TUNING_FILE) apply as usual.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "hpctrain/base/error.hpp"
#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/collectives/mpi_transport.hpp"
#include "hpctrain/collectives/transport_factory.hpp"
#include "mpi_benchmark.hpp"

namespace {

using hpctrain::coll::Algorithm;
using hpctrain::coll::Communicator;
using hpctrain::coll::DataType;
using hpctrain::coll::ReduceOp;
using hpctrain::coll::TransportKind;

struct Options {
  std::size_t min_bytes = 8;
  std::size_t max_bytes = std::size_t{256} << 20;
  std::size_t step = 2;
  long long iters = 0;   // 0: by size (iterations_for)
  long long warmup = -1; // -1: by iteration count
  // Every algorithm, then the cost model's pick and the vendor's.
  std::vector<Algorithm> algorithms{
      Algorithm::ring,
      Algorithm::tree,
      Algorithm::recursive_doubling,
      Algorithm::rabenseifner,
      Algorithm::shm,
      Algorithm::hierarchical,
      Algorithm::automatic,
      Algorithm::mpi,
  };
  std::vector<TransportKind> transports{hpctrain::coll::Tuning::from_environment().transport};
};

/// Column/benchmark name of an algorithm ("auto" rather than "automatic", as the env knob).
std::string algo_name(Algorithm a) { return a == Algorithm::automatic ? "auto" : std::string(to_string(a)); }

using hpctrain::bench::parse_count;

Options parse_options(int& argc, char** argv) {
  using hpctrain::bench::flag_or_env;
  using hpctrain::bench::take_flag;
  Options o;
  if (auto v = flag_or_env(take_flag(argc, argv, "min_bytes"), "HPCTRAIN_BENCH_MIN_BYTES"))
    o.min_bytes = hpctrain::bench::parse_bytes(*v, "min_bytes");
  if (auto v = flag_or_env(take_flag(argc, argv, "max_bytes"), "HPCTRAIN_BENCH_MAX_BYTES"))
    o.max_bytes = hpctrain::bench::parse_bytes(*v, "max_bytes");
  if (auto v = flag_or_env(take_flag(argc, argv, "step"), "HPCTRAIN_BENCH_STEP"))
    o.step = static_cast<std::size_t>(parse_count(*v, "step", 2));
  if (auto v = flag_or_env(take_flag(argc, argv, "iters"), "HPCTRAIN_BENCH_ITERS"))
    o.iters = parse_count(*v, "iters", 1);
  if (auto v = flag_or_env(take_flag(argc, argv, "warmup"), "HPCTRAIN_BENCH_WARMUP"))
    o.warmup = parse_count(*v, "warmup", 0);
  if (auto v = flag_or_env(take_flag(argc, argv, "algorithms"), "HPCTRAIN_BENCH_ALGORITHMS")) {
    o.algorithms.clear();
    std::stringstream list(*v);
    for (std::string name; std::getline(list, name, ',');) {
      if (!name.empty()) o.algorithms.push_back(hpctrain::coll::parse_algorithm(name, "algorithms"));
    }
    HPCTRAIN_REQUIRE(!o.algorithms.empty(), "algorithms: empty list");
  }
  if (auto v = flag_or_env(take_flag(argc, argv, "transports"), "HPCTRAIN_BENCH_TRANSPORTS")) {
    o.transports.clear();
    std::stringstream list(*v);
    for (std::string name; std::getline(list, name, ',');) {
      if (!name.empty()) o.transports.push_back(hpctrain::coll::parse_transport_kind(name, "transports"));
    }
    HPCTRAIN_REQUIRE(!o.transports.empty(), "transports: empty list");
  }
  // float32 elements: sizes are whole elements.
  o.min_bytes = std::max<std::size_t>(4, (o.min_bytes + 3) / 4 * 4);
  HPCTRAIN_REQUIRE(o.max_bytes >= o.min_bytes, "max_bytes (" + std::to_string(o.max_bytes) +
                                                   ") is below min_bytes (" +
                                                   std::to_string(o.min_bytes) + ")");
  return o;
}

/// Fixed iteration count of a size: about 512 MiB of payload per benchmark, between 5 and 1000
/// iterations, so 8 B runs 1000 iterations and 256 MiB runs 5. The same on every rank.
long long iterations_for(std::size_t bytes, const Options& o) {
  if (o.iters > 0) return o.iters;
  const double budget_bytes = 512.0 * (1 << 20);
  return std::clamp<long long>(static_cast<long long>(budget_bytes / static_cast<double>(bytes)), 5, 1000);
}

long long warmup_for(long long iters, const Options& o) {
  return o.warmup >= 0 ? o.warmup : std::max<long long>(2, iters / 10);
}

// ---- input pattern and check -------------------------------------------------------------
// Rank r contributes (i mod 13) + r to element i; the sum over p ranks, p·(i mod 13) +
// p(p-1)/2, is an integer below 2^24 for p < 4000, so float32 computes it exactly in any order.
// 13 does not divide the block or segment sizes, so a misplaced block shows up.
constexpr std::size_t kPatternPeriod = 13;

void fill_input(std::vector<float>& send, int rank) {
  for (std::size_t i = 0; i < send.size(); ++i) {
    send[i] = static_cast<float>(i % kPatternPeriod) + static_cast<float>(rank);
  }
}

long long count_wrong(const std::vector<float>& recv, int ranks) {
  const double p = ranks;
  long long wrong = 0;
  for (std::size_t i = 0; i < recv.size(); ++i) {
    const double expected = p * static_cast<double>(i % kPatternPeriod) + p * (p - 1) / 2;
    wrong += static_cast<double>(recv[i]) != expected;  // NaN (poison) never compares equal
  }
  return wrong;
}

// ---- results kept for rank 0's table -----------------------------------------------------

struct Result {
  double time_us = 0, algbw = 0, busbw = 0, over_bound = 0;
  long long wrong = 0;
  bool skipped = false;
};
std::map<std::size_t, std::map<std::string, Result>> g_results;  // bytes -> column -> best
std::vector<std::string> g_columns;  // in registration order
long long g_total_wrong = 0;
double g_copy_gbps = 0;   // measured at startup (measure_copy_bandwidth): B per rank
double g_bound_gbps = 0;  // busbw bound: B * 2(p-1)/p
int g_ranks_per_node = 0;  // as the communicators see it (detect_ranks_per_node)

/// memcpy bandwidth (GB/s, 1e9, bytes copied / time) of each rank copying 64 MiB at the same
/// time, best of 5; the slowest rank's value. Collective over `comm`.
double measure_copy_bandwidth(MPI_Comm comm) {
  constexpr std::size_t kBytes = std::size_t{64} << 20;
  std::vector<char> src(kBytes, 1), dst(kBytes, 0);  // touched before timing
  double best_s = std::numeric_limits<double>::infinity();
  for (int i = 0; i < 6; ++i) {  // the first is a warm-up
    HPCTRAIN_CHECK_MPI(MPI_Barrier(comm));
    const double t0 = MPI_Wtime();
    std::memcpy(dst.data(), src.data(), kBytes);
    const double t = MPI_Wtime() - t0;
    if (i > 0) best_s = std::min(best_s, t);
    src[static_cast<std::size_t>(i)] = dst[kBytes - 1 - static_cast<std::size_t>(i)];  // keep the copy
  }
  const double mine = static_cast<double>(kBytes) / best_s / 1e9;
  double slowest = 0;
  HPCTRAIN_CHECK_MPI(MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MIN, comm));
  return slowest;
}

void record(std::size_t bytes, const std::string& algo, const Result& r) {
  auto [it, inserted] = g_results[bytes].try_emplace(algo, r);
  if (!inserted) {  // --benchmark_repetitions: keep the best time, the worst correctness
    Result& best = it->second;
    const long long wrong = std::max(best.wrong, r.wrong);
    if (r.time_us < best.time_us) best = r;
    best.wrong = wrong;
  }
  g_total_wrong += r.wrong;
}

void bench_allreduce(benchmark::State& state, Communicator* comm, Algorithm algo, std::string column,
                     std::size_t bytes, long long warmup) {
  const int p = comm->size(), rank = comm->rank();
  const std::size_t count = bytes / sizeof(float);
  std::vector<float> send(count), recv(count, 0.0f);  // touched here, not in the timed region
  fill_input(send, rank);
  for (long long i = 0; i < warmup; ++i) {
    comm->allreduce(send.data(), recv.data(), count, DataType::f32, ReduceOp::sum, algo);
  }
  const auto times_s = hpctrain::bench::timed_loop(
      state, MPI_COMM_WORLD,
      [&] { comm->allreduce(send.data(), recv.data(), count, DataType::f32, ReduceOp::sum, algo); },
      [&](benchmark::IterationCount i, benchmark::IterationCount n) {
        // Poison the output before the last iteration, so the check below sees only its result.
        if (i + 1 == n) std::fill(recv.begin(), recv.end(), std::numeric_limits<float>::quiet_NaN());
      });
  const long long wrong = hpctrain::bench::sum_over_ranks(count_wrong(recv, p), MPI_COMM_WORLD);

  // Bandwidths from the median iteration: on a shared machine one descheduled iteration can
  // move the mean by more than the difference between algorithms (real_time is still the mean).
  const auto stats = hpctrain::bench::summarize(times_s);
  const double time_s = stats.median_s;
  const double algbw = static_cast<double>(bytes) / time_s / 1e9;
  const double busbw = algbw * 2.0 * (p - 1) / p;
  state.counters["time_median_us"] = benchmark::Counter(stats.median_s * 1e6);
  state.counters["time_min_us"] = benchmark::Counter(stats.min_s * 1e6);
  state.counters["algbw"] = benchmark::Counter(algbw);
  state.counters["busbw"] = benchmark::Counter(busbw);
  state.counters["bytes"] = benchmark::Counter(static_cast<double>(bytes));
  state.counters["ranks"] = benchmark::Counter(p);
  state.counters["wrong"] = benchmark::Counter(static_cast<double>(wrong));
  const double over_bound = g_bound_gbps > 0 ? busbw / g_bound_gbps : 0.0;  // p = 1: no bound, 0
  state.counters["copy_GBps"] = benchmark::Counter(g_copy_gbps);
  state.counters["bound_GBps"] = benchmark::Counter(g_bound_gbps);
  state.counters["busbw_over_bound"] = benchmark::Counter(over_bound);
  state.SetLabel(column);
  if (wrong != 0) {
    state.SkipWithError(("allreduce/" + column + "/" + std::to_string(bytes) + ": " +
                         std::to_string(wrong) + " wrong elements in the last iteration")
                            .c_str());
  }
  record(bytes, column, Result{time_s * 1e6, algbw, busbw, over_bound, wrong, wrong != 0});
}

// ---- nccl-tests-style table --------------------------------------------------------------

std::string human_bytes(std::size_t b) {
  if (b >= (1u << 20) && b % (1u << 20) == 0) return std::to_string(b >> 20) + " MiB";
  if (b >= (1u << 10) && b % (1u << 10) == 0) return std::to_string(b >> 10) + " KiB";
  return std::to_string(b) + " B";
}

/// Ranks per node as a Communicator sees them, so the table's "auto picks" line matches what auto
/// ran: the tuning's virtual nodes, else the largest group of ranks sharing a machine
/// (MPI_COMM_TYPE_SHARED; several on a real cluster). Collective over MPI_COMM_WORLD.
int detect_ranks_per_node(const hpctrain::coll::Tuning& tuning) {
  if (tuning.ranks_per_node > 0) return tuning.ranks_per_node;
  MPI_Comm node = MPI_COMM_NULL;
  int rank = 0, node_size = 0, largest = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  MPI_Comm_size(node, &node_size);
  MPI_Comm_free(&node);
  MPI_Allreduce(&node_size, &largest, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return largest;
}

void print_table(std::FILE* out, const Options& o, const hpctrain::coll::Tuning& tuning, int p) {
  if (g_results.empty()) return;
  std::vector<std::string> algos;
  for (const std::string& name : g_columns) {
    if (std::find(algos.begin(), algos.end(), name) != algos.end()) continue;
    for (const auto& [bytes, row] : g_results) {
      if (row.count(name)) {
        algos.push_back(name);
        break;
      }
    }
  }
  auto has = [&](const char* a) { return std::find(algos.begin(), algos.end(), a) != algos.end(); };
  const bool ring_ratio = has("ring") && has("mpi"), tree_ratio = has("tree") && has("mpi");
  const bool ucx_ring_ratio = has("ring@ucx") && has("ring"), ucx_mpi_ratio = has("ring@ucx") && has("mpi");

  std::fprintf(out, "#\n# bench_allreduce: %d ranks, float32 sum, out of place; time = median over the "
                    "iterations of the slowest rank's time\n", p);
  std::fprintf(out, "# tuning: auto = %s (cost model from %s); ring segment %s, window %zu; "
                    "tree segment %s, binomial <= %s; %zu polls before yielding\n",
               algo_name(tuning.allreduce_algorithm).c_str(),
               tuning.tuning_file.empty() ? "the built-in defaults" : tuning.tuning_file.c_str(),
               human_bytes(tuning.ring_segment_bytes).c_str(), tuning.ring_window,
               human_bytes(tuning.tree_segment_bytes).c_str(),
               human_bytes(tuning.tree_binomial_max_bytes).c_str(), tuning.spin_polls);
  std::fprintf(out, "# algbw = size/time, busbw = algbw*2(p-1)/p (GB/s); /bound = busbw/bound; #wrong = "
                    "wrong elements (all ranks)\n");
  std::fprintf(out, "# bound: memcpy %.2f GB/s per rank with all %d ranks copying (64 MiB, best of 5, slowest "
                    "rank, this run) -> busbw bound %.2f GB/s (= copy * 2(p-1)/p: every input read and every "
                    "output written once within a node)\n#\n", g_copy_gbps, p, g_bound_gbps);
  // Header: algorithm names centred over their four columns.
  std::fprintf(out, "#%38s", "");
  for (const auto& a : algos) std::fprintf(out, "  %-38s", ("---------- " + a + " ----------").c_str());
  if (ring_ratio) std::fprintf(out, "  %9s", "ring/mpi");
  if (tree_ratio) std::fprintf(out, "  %9s", "tree/mpi");
  if (ucx_ring_ratio) std::fprintf(out, "  %11s", "ringucx/ring");
  if (ucx_mpi_ratio) std::fprintf(out, "  %11s", "ringucx/mpi");
  std::fprintf(out, "\n#%10s %11s %6s %6s", "size(B)", "count", "type", "redop");
  for (std::size_t i = 0; i < algos.size(); ++i)
    std::fprintf(out, "  %10s %6s %6s %6s %6s", "time(us)", "algbw", "busbw", "/bound", "#wrong");
  if (ring_ratio) std::fprintf(out, "  %9s", "busbw");
  if (tree_ratio) std::fprintf(out, "  %9s", "time");
  if (ucx_ring_ratio) std::fprintf(out, "  %11s", "busbw");
  if (ucx_mpi_ratio) std::fprintf(out, "  %11s", "busbw");
  std::fprintf(out, "\n");
  for (const auto& [bytes, row] : g_results) {
    std::fprintf(out, " %10zu %11zu %6s %6s", bytes, bytes / sizeof(float), "float", "sum");
    for (const auto& a : algos) {
      auto it = row.find(a);
      if (it == row.end()) {
        std::fprintf(out, "  %10s %6s %6s %6s %6s", "-", "-", "-", "-", "-");
        continue;
      }
      const Result& r = it->second;
      std::fprintf(out, "  %10.1f %6.2f %6.2f %6.2f %6lld", r.time_us, r.algbw, r.busbw, r.over_bound, r.wrong);
    }
    auto ratio = [&](const char* num, const char* den, bool busbw, int width = 9) {
      auto n = row.find(num), d = row.find(den);
      if (n == row.end() || d == row.end()) return std::fprintf(out, "  %*s", width, "-");
      const double x = busbw ? n->second.busbw / d->second.busbw : n->second.time_us / d->second.time_us;
      return std::fprintf(out, "  %*.2f", width, x);
    };
    if (ring_ratio) ratio("ring", "mpi", true);
    if (tree_ratio) ratio("tree", "mpi", false);
    if (ucx_ring_ratio) ratio("ring@ucx", "ring", true, 11);
    if (ucx_mpi_ratio) ratio("ring@ucx", "mpi", true, 11);
    std::fprintf(out, "\n");
  }
  if (has("auto") && tuning.allreduce_algorithm == Algorithm::automatic) {
    // What the model picks at each size, for the ranks per node the communicators found.
    const int rpn = g_ranks_per_node > 0 ? g_ranks_per_node : p;
    std::fprintf(out, "# auto (cost model, %d ranks, %d per node):", p, rpn);
    for (const auto& [bytes, row] : g_results) {
      std::fprintf(out, " %s->%s", human_bytes(bytes).c_str(),
                   std::string(to_string(tuning.choose_allreduce(bytes, p, rpn))).c_str());
    }
    std::fprintf(out, "\n");
  }
  std::fprintf(out, "# Out of bounds values : %lld %s\n#\n", g_total_wrong, g_total_wrong ? "FAILED" : "OK");
  std::fflush(out);
}

int run(int& argc, char**& argv) {
  const Options options = parse_options(argc, argv);
  // send and recv, plus about one message of algorithm scratch (ring chunks, shared memory).
  const std::size_t largest = hpctrain::bench::largest_swept_size(options.min_bytes, options.max_bytes, options.step);
  hpctrain::bench::require_memory_for("--max_bytes=" + hpctrain::io::format_bytes(static_cast<double>(options.max_bytes)),
                                      "the send, receive and scratch buffers of " +
                                          hpctrain::io::format_bytes(static_cast<double>(largest)) + " each",
                                      3.0 * static_cast<double>(largest), MPI_COMM_WORLD);
  const auto format = hpctrain::bench::peek_flag(argc, argv, "benchmark_format");
  // One communicator per transport; MPI_Allreduce (algorithm mpi) runs on the MPI one, made for it
  // when --transports leaves MPI out.
  std::map<TransportKind, std::unique_ptr<Communicator>> comms;
  for (TransportKind k : options.transports) {
    if (!comms.count(k)) comms.emplace(k, std::make_unique<Communicator>(hpctrain::coll::make_transport(MPI_COMM_WORLD, k)));
  }
  const bool wants_vendor =
      std::find(options.algorithms.begin(), options.algorithms.end(), Algorithm::mpi) != options.algorithms.end();
  if (wants_vendor && !comms.count(TransportKind::mpi)) {
    comms.emplace(TransportKind::mpi, std::make_unique<Communicator>(hpctrain::coll::make_mpi_transport(MPI_COMM_WORLD)));
  }
  Communicator& comm = *comms.begin()->second;
  g_copy_gbps = measure_copy_bandwidth(MPI_COMM_WORLD);
  g_ranks_per_node = detect_ranks_per_node(comm.tuning());
  g_bound_gbps = g_copy_gbps * 2.0 * (comm.size() - 1) / comm.size();

  // Size-major order: the algorithms of one size run back to back, so a ratio compares runs a
  // few seconds apart, not minutes apart under different neighbours' load.
  for (std::size_t bytes = options.min_bytes; bytes <= options.max_bytes; bytes *= options.step) {
    const long long iters = iterations_for(bytes, options);
    const long long warmup = warmup_for(iters, options);
    for (Algorithm algo : options.algorithms) {
      for (TransportKind kind : options.transports) {
        if (algo == Algorithm::mpi) kind = TransportKind::mpi;  // the vendor's, once
        const std::string column = kind == TransportKind::mpi
                                       ? algo_name(algo)
                                       : algo_name(algo) + "@" + hpctrain::coll::to_string(kind);
        if (std::find(g_columns.begin(), g_columns.end(), column) == g_columns.end()) g_columns.push_back(column);
        const std::string name = "allreduce/" + column + "/" + std::to_string(bytes);
        benchmark::RegisterBenchmark(name.c_str(), bench_allreduce, comms.at(kind).get(), algo, column, bytes,
                                     warmup)
            ->Iterations(iters)
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond);
        if (algo == Algorithm::mpi) break;
      }
    }
    if (bytes > options.max_bytes / options.step) break;  // no overflow on the next step
  }
  if (!hpctrain::bench::run_benchmarks(argc, argv, MPI_COMM_WORLD)) return 2;

  const long long wrong = g_total_wrong;  // identical on every rank (summed over ranks)
  if (comm.rank() == 0) {
    const bool console = !format || *format == "console";
    print_table(console ? stdout : stderr, options, comm.tuning(), comm.size());
  }
  return wrong == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    hpctrain::bench::MpiSession mpi(argc, argv);
    const int rc = run(argc, argv);
    return rc;
  } catch (const std::exception& e) {
    hpctrain::abort_job(e);
  }
}
