// bench_reduce_scatter: hpctrain's reduce-scatter and all-gather (the ZeRO collectives), per
// algorithm, next to MPI_Reduce_scatter_block and MPI_Allgather, nccl-tests style, in the same run.
//
//   mpirun -n P build/bin/bench_reduce_scatter [--min_bytes=1K] [--max_bytes=64M] [--step=4]
//          [--iters=20] [--warmup=3] [Google Benchmark flags]
//
// Sizes are the whole vector (n bytes, float32; each rank's block n/P). Benchmarks, per size:
//   reduce_scatter/ring/<n>          Communicator::ireduce_scatter(..., ring).wait() (block semantics)
//   reduce_scatter/in_place/<n>      ireduce_scatter_in_place(..., ring): the balanced in-place form ZeRO uses
//   reduce_scatter/rabenseifner/<n>  the block form by recursive halving (Algorithm::rabenseifner)
//   reduce_scatter/rabenseifner_in_place/<n>   the in-place form by recursive halving
//   reduce_scatter/shm/<n>           the block form through node shared memory (Algorithm::shm; only
//                                    when every rank is on one node, HPCTRAIN_RANKS_PER_NODE included)
//   reduce_scatter/shm_in_place/<n>  the in-place form through node shared memory
//   reduce_scatter/hierarchical/<n>  the block form by shm within each node, then ring or halving
//                                    among the nodes (only over several nodes of equal size)
//   reduce_scatter/hierarchical_in_place/<n>   the in-place form, hierarchically
//   reduce_scatter/auto/<n>          the block form as `auto` chooses (the cost model)
//   reduce_scatter/mpi/<n>           MPI_Reduce_scatter_block
//   allgather/<form>/<n>             the same for all-gather (recursive doubling), MPI_Allgather
// Each iteration: barrier (untimed), MPI_Wtime around the collective, the slowest rank's time.
// Counters as nccl-tests has them for these collectives: algbw = n / time (GB/s, 1e9; time =
// the median iteration), busbw = algbw (p-1)/p; `wrong` = mismatching elements of the last
// iteration summed over ranks (small-integer inputs: the sums are exact).

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "hpctrain/base/error.hpp"
#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/collectives/mpi_transport.hpp"
#include "mpi_benchmark.hpp"

namespace {

using hpctrain::coll::Algorithm;
using hpctrain::coll::Communicator;
using hpctrain::coll::DataType;
using hpctrain::coll::ReduceOp;

struct Options {
  std::size_t min_bytes = 1 << 10, max_bytes = 64 << 20;
  std::size_t step = 4;
  long long iters = 20, warmup = 3;
};

enum class Op { reduce_scatter, allgather };
/// What runs: an algorithm of ours in the block or the balanced in-place form, or MPI's.
struct Form {
  const char* name;
  Algorithm algo;  ///< Algorithm::mpi: MPI_Reduce_scatter_block / MPI_Allgather
  bool in_place;
};
const Form kForms[] = {{"ring", Algorithm::ring, false},
                       {"in_place", Algorithm::ring, true},
                       {"rabenseifner", Algorithm::rabenseifner, false},
                       {"rabenseifner_in_place", Algorithm::rabenseifner, true},
                       {"shm", Algorithm::shm, false},
                       {"shm_in_place", Algorithm::shm, true},
                       {"hierarchical", Algorithm::hierarchical, false},
                       {"hierarchical_in_place", Algorithm::hierarchical, true},
                       {"auto", Algorithm::automatic, false},
                       {"mpi", Algorithm::mpi, false}};
const char* name(Op op) { return op == Op::reduce_scatter ? "reduce_scatter" : "allgather"; }

/// One collective on buffers sized for `count` elements in all (count divisible by P).
struct Buffers {
  std::vector<float> full, block, out;
  Buffers(std::size_t count, int p, int rank)
      : full(count), block(count / static_cast<std::size_t>(p)), out(count) {
    for (std::size_t i = 0; i < count; ++i) full[i] = static_cast<float>((i + static_cast<std::size_t>(rank)) % 7);
    for (std::size_t i = 0; i < block.size(); ++i) block[i] = static_cast<float>(rank * 3 + static_cast<int>(i % 5));
  }
};

/// Untimed, before every run: the in-place forms consume their input, so it is put back (and
/// the output of the others poisoned, so the check sees only the last iteration's result).
void reset(const Communicator& comm, Op op, const Form& form, Buffers& b) {
  const std::size_t per = b.block.size(), r = static_cast<std::size_t>(comm.rank());
  std::fill(b.out.begin(), b.out.end(), std::numeric_limits<float>::quiet_NaN());
  if (!form.in_place) return;
  if (op == Op::reduce_scatter) {
    std::copy(b.full.begin(), b.full.end(), b.out.begin());
  } else {
    std::copy(b.block.begin(), b.block.end(), b.out.begin() + static_cast<std::ptrdiff_t>(r * per));
  }
}

void run_once(Communicator& comm, Op op, const Form& form, Buffers& b) {
  const std::size_t count = b.full.size(), per = b.block.size();
  const bool mpi = form.algo == Algorithm::mpi;
  if (op == Op::reduce_scatter) {
    if (mpi) {
      HPCTRAIN_CHECK_MPI(MPI_Reduce_scatter_block(b.full.data(), b.out.data(), static_cast<int>(per), MPI_FLOAT, MPI_SUM,
                                                  MPI_COMM_WORLD));
    } else if (form.in_place) {
      comm.ireduce_scatter_in_place(b.out.data(), count, DataType::f32, ReduceOp::sum, form.algo).wait();
    } else {
      comm.ireduce_scatter(b.full.data(), b.out.data(), per, DataType::f32, ReduceOp::sum, form.algo).wait();
    }
    return;
  }
  if (!mpi && form.in_place) comm.iallgather_in_place(b.out.data(), count, DataType::f32, form.algo).wait();
  if (!mpi && !form.in_place) comm.iallgather(b.block.data(), b.out.data(), per, DataType::f32, form.algo).wait();
  if (mpi) {
    HPCTRAIN_CHECK_MPI(MPI_Allgather(b.block.data(), static_cast<int>(per), MPI_FLOAT, b.out.data(), static_cast<int>(per),
                                     MPI_FLOAT, MPI_COMM_WORLD));
  }
}

long long count_wrong(const Communicator& comm, Op op, const Form& form, const Buffers& b) {
  const int p = comm.size();
  const std::size_t per = b.block.size(), r = static_cast<std::size_t>(comm.rank());
  long long wrong = 0;
  if (op == Op::reduce_scatter) {
    const std::size_t at = form.in_place ? r * per : 0;  // balanced blocks are equal here
    for (std::size_t i = 0; i < per; ++i) {
      const std::size_t g = r * per + i;
      float want = 0;
      for (int q = 0; q < p; ++q) want += static_cast<float>((g + static_cast<std::size_t>(q)) % 7);
      if (b.out[at + i] != want) ++wrong;
    }
    return wrong;
  }
  for (int q = 0; q < p; ++q)
    for (std::size_t i = 0; i < per; ++i)
      if (b.out[static_cast<std::size_t>(q) * per + i] != static_cast<float>(q * 3 + static_cast<int>(i % 5))) ++wrong;
  return wrong;
}

void bench(benchmark::State& state, Communicator* comm, Op op, Form form, std::size_t bytes, long long warmup) {
  // `form` by value: the registered closure keeps its own copy.
  const int p = comm->size();
  Buffers b(bytes / sizeof(float), p, comm->rank());
  for (long long i = 0; i < warmup; ++i) {
    reset(*comm, op, form, b);
    run_once(*comm, op, form, b);
  }
  const auto times_s = hpctrain::bench::timed_loop(
      state, MPI_COMM_WORLD, [&] { run_once(*comm, op, form, b); },
      [&](benchmark::IterationCount, benchmark::IterationCount) { reset(*comm, op, form, b); });
  const long long wrong = hpctrain::bench::sum_over_ranks(count_wrong(*comm, op, form, b), MPI_COMM_WORLD);
  const auto stats = hpctrain::bench::summarize(times_s);
  const double algbw = static_cast<double>(bytes) / stats.median_s / 1e9;
  state.counters["time_median_us"] = benchmark::Counter(stats.median_s * 1e6);
  state.counters["algbw"] = benchmark::Counter(algbw);
  state.counters["busbw"] = benchmark::Counter(algbw * (p - 1) / p);
  state.counters["bytes"] = benchmark::Counter(static_cast<double>(bytes));
  state.counters["ranks"] = benchmark::Counter(p);
  state.counters["wrong"] = benchmark::Counter(static_cast<double>(wrong));
  state.SetLabel(std::string(name(op)) + " " + form.name);
  if (wrong != 0) state.SkipWithError((std::to_string(wrong) + " wrong elements in the last iteration").c_str());
}

/// Which node algorithms can run: shm on one machine (MPI_COMM_TYPE_SHARED) with no smaller
/// virtual nodes; hierarchical over several nodes of equal size (virtual or machines).
struct NodeLayout {
  bool one_node = false, equal_nodes = false;
};
NodeLayout node_layout(int ranks) {
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int local = 0;
  MPI_Comm_size(node, &local);
  MPI_Comm_free(&node);
  int smallest = local, largest = local;
  MPI_Allreduce(&local, &smallest, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&local, &largest, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  const int per_node = hpctrain::coll::Tuning::from_environment().ranks_per_node;
  NodeLayout l;
  l.one_node = smallest == ranks && (per_node <= 0 || per_node >= ranks);
  l.equal_nodes = per_node > 0 && per_node < ranks ? ranks % per_node == 0 && smallest % per_node == 0
                                                   : smallest == largest && smallest < ranks;
  return l;
}

int run(int& argc, char** argv) {
  using hpctrain::bench::parse_bytes;
  using hpctrain::bench::parse_count;
  using hpctrain::bench::take_flag;
  Options o;
  if (auto v = take_flag(argc, argv, "min_bytes")) o.min_bytes = parse_bytes(*v, "min_bytes");
  if (auto v = take_flag(argc, argv, "max_bytes")) o.max_bytes = parse_bytes(*v, "max_bytes");
  if (auto v = take_flag(argc, argv, "step")) o.step = static_cast<std::size_t>(parse_count(*v, "step", 2));
  if (auto v = take_flag(argc, argv, "iters")) o.iters = parse_count(*v, "iters", 1);
  if (auto v = take_flag(argc, argv, "warmup")) o.warmup = parse_count(*v, "warmup", 0);
  // The whole vector, its reduced copy and the output (the block is 1/P more).
  const std::size_t largest = hpctrain::bench::largest_swept_size(o.min_bytes, o.max_bytes, o.step);
  hpctrain::bench::require_memory_for("--max_bytes=" + hpctrain::io::format_bytes(static_cast<double>(o.max_bytes)),
                                      "the input, block and output buffers of " +
                                          hpctrain::io::format_bytes(static_cast<double>(largest)),
                                      4.0 * static_cast<double>(largest), MPI_COMM_WORLD);
  Communicator comm(hpctrain::coll::make_mpi_transport(MPI_COMM_WORLD));
  const auto unit = sizeof(float) * static_cast<std::size_t>(comm.size());
  const NodeLayout layout = node_layout(comm.size());
  for (std::size_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= o.step) {
    const std::size_t n = std::max(unit, bytes / unit * unit);  // whole blocks of float32
    for (Op op : {Op::reduce_scatter, Op::allgather}) {
      for (const Form& form : kForms) {
        if (form.algo == Algorithm::shm && !layout.one_node) continue;  // it refuses several nodes
        if (form.algo == Algorithm::hierarchical && !layout.equal_nodes) continue;  // shm, or refused
        const std::string label = std::string(name(op)) + "/" + form.name + "/" + std::to_string(n);
        benchmark::RegisterBenchmark(label.c_str(), bench, &comm, op, form, n, o.warmup)
            ->Iterations(o.iters)
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
  return hpctrain::bench::run_benchmarks(argc, argv, MPI_COMM_WORLD) ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    hpctrain::bench::MpiSession mpi(argc, argv);
    return run(argc, argv);
  } catch (const std::exception& e) {
    hpctrain::abort_job(e);
  }
}
