// bench_reproducible: the reproducible (exact fixed-point) all-reduce next to the ordinary float
// all-reduce over the same algorithm, and MPI_Allreduce, in the same run (docs/deterministic.md).
//
//   mpirun -n P build/bin/bench_reproducible [--min_bytes=4K] [--max_bytes=64M] [--step=4]
//          [--iters=N] [--algorithms=ring,tree,mpi] [Google Benchmark flags]
//
// Benchmarks `allreduce/<algorithm>/<bytes>` (float32 sum, Communicator::allreduce) and
// `reproducible/<algorithm>/<bytes>` (Communicator::allreduce_reproducible with the same
// algorithm carrying its int64 sum; `mpi` = MPI_Allreduce carries it). <bytes> is the float32
// payload in both, and algbw/busbw are computed from it (busbw = algbw * 2(p-1)/p, nccl-tests),
// so the two rows compare the time to deliver the same sum; the reproducible one moves twice
// the bytes (int64) plus a small exponent all-reduce and two passes over the data.
// Fixed iterations on every rank, barrier outside the timed region, time = max over ranks,
// median of the iterations. `wrong` (reproducible rows): elements whose bits differ from the
// same sum computed with the ring, counted over ranks (must be 0).

#include <algorithm>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "hpctrain/base/error.hpp"
#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/collectives/mpi_transport.hpp"
#include "hpctrain/collectives/reproducible_sum.hpp"
#include "mpi_benchmark.hpp"

namespace {

using hpctrain::coll::Algorithm;
using hpctrain::coll::Communicator;

struct Options {
  std::size_t min_bytes = std::size_t{4} << 10;
  std::size_t max_bytes = std::size_t{64} << 20;
  std::size_t step = 4;
  long long iters = 0;  // 0: by size
  std::vector<Algorithm> algorithms{Algorithm::ring, Algorithm::tree, Algorithm::mpi};
};

long long iterations_for(std::size_t bytes) {
  if (bytes <= (std::size_t{1} << 20)) return 50;
  if (bytes <= (std::size_t{16} << 20)) return 10;
  return 5;
}

void bench(benchmark::State& state, Communicator& comm, Algorithm algo, bool reproducible, std::size_t bytes) {
  const std::size_t n = bytes / sizeof(float);
  std::vector<float> send(n), recv(n), check(n);
  std::mt19937 rng(1234u + static_cast<unsigned>(comm.rank()));
  std::normal_distribution<float> normal(0.f, 1e-3f);
  for (auto& x : send) x = normal(rng);
  auto times = hpctrain::bench::timed_loop(state, MPI_COMM_WORLD, [&] {
    if (reproducible) {
      comm.allreduce_reproducible(send.data(), recv.data(), n, algo);
    } else {
      comm.allreduce(send.data(), recv.data(), n, hpctrain::coll::ReduceOp::sum, algo);
    }
  });
  long long wrong = 0;
  if (reproducible) {
    comm.allreduce_reproducible(send.data(), check.data(), n, Algorithm::ring);
    for (std::size_t i = 0; i < n; ++i) wrong += std::memcmp(&check[i], &recv[i], sizeof(float)) != 0;
    wrong = hpctrain::bench::sum_over_ranks(wrong, MPI_COMM_WORLD);
  }
  const double t = hpctrain::bench::summarize(times).median_s;
  const double p = comm.size();
  const double algbw = static_cast<double>(bytes) / t / 1e9;
  state.counters["algbw"] = benchmark::Counter(algbw);
  state.counters["busbw"] = benchmark::Counter(p > 1 ? algbw * 2.0 * (p - 1) / p : algbw);
  state.counters["time_us"] = benchmark::Counter(t * 1e6);
  state.counters["wrong"] = benchmark::Counter(static_cast<double>(wrong));
  state.counters["ranks"] = benchmark::Counter(p);
}

int run(int& argc, char** argv) {
  using hpctrain::bench::parse_count;
  using hpctrain::bench::take_flag;
  Options o;
  if (auto v = take_flag(argc, argv, "min_bytes")) o.min_bytes = hpctrain::bench::parse_bytes(*v, "min_bytes");
  if (auto v = take_flag(argc, argv, "max_bytes")) o.max_bytes = hpctrain::bench::parse_bytes(*v, "max_bytes");
  HPCTRAIN_REQUIRE(o.min_bytes >= sizeof(float) && o.min_bytes <= o.max_bytes,
                   "--min_bytes must be at least 4 and at most --max_bytes");
  if (auto v = take_flag(argc, argv, "step")) o.step = static_cast<std::size_t>(parse_count(*v, "step", 2));
  if (auto v = take_flag(argc, argv, "iters")) o.iters = parse_count(*v, "iters", 1);
  if (auto v = take_flag(argc, argv, "algorithms")) {
    o.algorithms.clear();
    std::stringstream list(*v);
    for (std::string name; std::getline(list, name, ',');) {
      if (!name.empty()) o.algorithms.push_back(hpctrain::coll::parse_algorithm(name, "--algorithms"));
    }
    HPCTRAIN_REQUIRE(!o.algorithms.empty(), "--algorithms='" + *v + "' names no algorithm");
  }
  // send, recv and check (3 x bytes), the exact sum's int64 accumulator (2 x) and its wire
  // buffers (about 1 x more).
  const std::size_t largest = hpctrain::bench::largest_swept_size(o.min_bytes, o.max_bytes, o.step);
  hpctrain::bench::require_memory_for("--max_bytes=" + hpctrain::io::format_bytes(static_cast<double>(o.max_bytes)),
                                      "the buffers and fixed-point accumulators for " +
                                          hpctrain::io::format_bytes(static_cast<double>(largest)),
                                      6.0 * static_cast<double>(largest), MPI_COMM_WORLD);
  Communicator comm(hpctrain::coll::make_mpi_transport(MPI_COMM_WORLD));
  for (std::size_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= o.step) {
    for (Algorithm algo : o.algorithms) {
      for (bool reproducible : {false, true}) {
        const std::string name = std::string(reproducible ? "reproducible/" : "allreduce/") +
                                 std::string(hpctrain::coll::to_string(algo)) + "/" + std::to_string(bytes);
        benchmark::RegisterBenchmark(name.c_str(), [&comm, algo, reproducible, bytes](benchmark::State& s) {
          bench(s, comm, algo, reproducible, bytes);
        })
            ->Iterations(o.iters > 0 ? o.iters : iterations_for(bytes))
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
  return hpctrain::bench::run_benchmarks(argc, argv, MPI_COMM_WORLD) ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  hpctrain::bench::MpiSession mpi(argc, argv);
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_reproducible: %s\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return 1;
}
