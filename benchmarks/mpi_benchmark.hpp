#pragma once
/// @file
/// Google Benchmark under MPI: what every hpctrain benchmark binary shares.
///
/// The rules (docs/benchmarks.md):
///  * every rank runs the same benchmarks with the same fixed iteration count
///    (`->Iterations(n)`): Google Benchmark's own iteration estimate differs per rank and would
///    leave ranks in different collectives (deadlock);
///  * a barrier outside the timed region before each iteration, then MPI_Wtime around the body;
///  * the iteration's time is the maximum over ranks (`UseManualTime` + `SetIterationTime`);
///  * only rank 0 reports: it gets the display reporter and `--benchmark_out`; other ranks get
///    a reporter that discards everything, and their `--benchmark_out*` arguments are removed.
///
/// ```
///   int main(int argc, char** argv) {
///     hpctrain::bench::MpiSession mpi(argc, argv);
///     ... benchmark::RegisterBenchmark(name, fn)->Iterations(n)->UseManualTime() ...
///     return hpctrain::bench::run_benchmarks(argc, argv, MPI_COMM_WORLD) ? 0 : 1;
///   }
///   void fn(benchmark::State& state) {
///     hpctrain::bench::timed_loop(state, MPI_COMM_WORLD, [&] { ... the measured call ... });
///   }
/// ```

#include <benchmark/benchmark.h>
#include <mpi.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hpctrain/base/error.hpp"
#include "hpctrain/collectives/mpi_transport.hpp"
#include "hpctrain/collectives/tuning.hpp"
#include "hpctrain/io/system_memory.hpp"

namespace hpctrain::bench {

/// MPI_Init_thread(MPI_THREAD_MULTIPLE) unless MPI is already up (e.g. by hpctrain::Environment);
/// MPI_Finalize on destruction only if this object initialised it. Never throws on destruction.
class MpiSession {
 public:
  MpiSession(int& argc, char**& argv) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      HPCTRAIN_CHECK_MPI(MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &thread_level_));
      owns_ = true;
    } else {
      MPI_Query_thread(&thread_level_);
    }
  }
  ~MpiSession() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owns_ && !finalized) MPI_Finalize();
  }
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  int thread_level() const noexcept { return thread_level_; }

 private:
  int thread_level_ = 0;
  bool owns_ = false;
};

inline int rank_of(MPI_Comm comm) {
  int r = 0;
  HPCTRAIN_CHECK_MPI(MPI_Comm_rank(comm, &r));
  return r;
}
inline int size_of(MPI_Comm comm) {
  int p = 0;
  HPCTRAIN_CHECK_MPI(MPI_Comm_size(comm, &p));
  return p;
}

/// The largest of every rank's `seconds` (collective over `comm`).
inline double max_over_ranks(double seconds, MPI_Comm comm) {
  double max = 0.0;
  HPCTRAIN_CHECK_MPI(MPI_Allreduce(&seconds, &max, 1, MPI_DOUBLE, MPI_MAX, comm));
  return max;
}

/// The sum of every rank's `value` (collective over `comm`).
inline long long sum_over_ranks(long long value, MPI_Comm comm) {
  long long sum = 0;
  HPCTRAIN_CHECK_MPI(MPI_Allreduce(&value, &sum, 1, MPI_LONG_LONG, MPI_SUM, comm));
  return sum;
}

/// Runs `body` once per benchmark iteration: `prepare(i, n)` (untimed; iteration i of n), a
/// barrier (untimed), MPI_Wtime around `body`, the max over ranks as the iteration time
/// (reported with SetIterationTime). Returns those per-iteration times in seconds, identical on
/// every rank. The benchmark must be registered with ->Iterations(n)->UseManualTime(), n the
/// same on every rank.
template <class Body, class Prepare>
std::vector<double> timed_loop(benchmark::State& state, MPI_Comm comm, Body&& body, Prepare&& prepare) {
  std::vector<double> times_s;
  times_s.reserve(static_cast<std::size_t>(state.max_iterations));
  benchmark::IterationCount i = 0;
  for (auto _ : state) {
    prepare(i++, state.max_iterations);
    HPCTRAIN_CHECK_MPI(MPI_Barrier(comm));
    const double start = MPI_Wtime();
    body();
    const double slowest = max_over_ranks(MPI_Wtime() - start, comm);
    state.SetIterationTime(slowest);
    times_s.push_back(slowest);
  }
  return times_s;
}
template <class Body>
std::vector<double> timed_loop(benchmark::State& state, MPI_Comm comm, Body&& body) {
  return timed_loop(state, comm, std::forward<Body>(body),
                    [](benchmark::IterationCount, benchmark::IterationCount) {});
}

/// Summary of per-iteration times: the mean (what Google Benchmark reports as real_time), the
/// median (robust to the neighbours' noise on a shared machine) and the minimum.
struct TimeStats {
  double mean_s = 0, median_s = 0, min_s = 0;
};
inline TimeStats summarize(std::vector<double> times_s) {
  TimeStats t;
  if (times_s.empty()) return t;
  std::sort(times_s.begin(), times_s.end());
  const std::size_t n = times_s.size();
  for (double x : times_s) t.mean_s += x;
  t.mean_s /= static_cast<double>(n);
  t.median_s = n % 2 ? times_s[n / 2] : 0.5 * (times_s[n / 2 - 1] + times_s[n / 2]);
  t.min_s = times_s.front();
  return t;
}

/// Removes `--name=value` (or `--name value`) from argv and returns the value of its last
/// occurrence. For the binary's own flags, which Google Benchmark would reject.
inline std::optional<std::string> take_flag(int& argc, char** argv, std::string_view name) {
  std::optional<std::string> value;
  const std::string eq = "--" + std::string(name) + "=";
  const std::string bare = "--" + std::string(name);
  int out = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg.substr(0, eq.size()) == eq) {
      value = std::string(arg.substr(eq.size()));
    } else if (arg == bare && i + 1 < argc) {
      value = argv[++i];
    } else {
      argv[out++] = argv[i];
    }
  }
  argc = out;
  argv[argc] = nullptr;
  return value;
}

/// The value of the last `--name=...` among the arguments, leaving them as they are.
inline std::optional<std::string> peek_flag(int argc, char** argv, std::string_view name) {
  std::optional<std::string> value;
  const std::string eq = "--" + std::string(name) + "=";
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg.substr(0, eq.size()) == eq) value = std::string(arg.substr(eq.size()));
  }
  return value;
}

/// Parses a byte count with an optional K/M/G (KiB/MiB/GiB) suffix; throws naming `what`.
inline std::size_t parse_bytes(const std::string& text, const std::string& what) {
  return hpctrain::coll::parse_byte_count(text, what);
}

/// The largest size a min..max sweep with factor `step` reaches (min x step^k <= max).
inline std::size_t largest_swept_size(std::size_t min_bytes, std::size_t max_bytes, std::size_t step) {
  std::size_t bytes = min_bytes;
  while (bytes <= max_bytes / step) bytes *= step;
  return bytes;
}

/// Refuses a size before anything of that size is allocated: `bytes_per_rank` (what one rank
/// holds at the largest size) times the ranks on this node must fit in the memory available
/// (io::available_memory: MemAvailable, or the cgroup's limit). Collective over `comm`; when a
/// rank's node is short, every rank throws, the lowest such rank with the message naming
/// `flag` (e.g. "--max_bytes=64G"), `what` needs the memory, and both figures; the others a
/// PeerReportedError (not printed).
inline void require_memory_for(const std::string& flag, const std::string& what, double bytes_per_rank,
                               MPI_Comm comm) {
  MPI_Comm node = MPI_COMM_NULL;
  int on_node = 1;
  if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
    MPI_Comm_size(node, &on_node);
    MPI_Comm_free(&node);
  }
  const io::AvailableMemory available = io::available_memory();
  const double need = bytes_per_rank * on_node;
  const bool fits = !available.known() || need <= static_cast<double>(available.bytes);
  int first_failing = fits ? size_of(comm) : rank_of(comm);
  MPI_Allreduce(MPI_IN_PLACE, &first_failing, 1, MPI_INT, MPI_MIN, comm);
  if (first_failing == size_of(comm)) return;
  if (first_failing != rank_of(comm)) {
    throw PeerReportedError("rank " + std::to_string(first_failing) + " refused " + flag + ": not enough memory",
                            __FILE__, __LINE__);
  }
  HPCTRAIN_FAIL(flag + ": " + what + " need " + io::format_bytes(bytes_per_rank) + " per rank" +
                (on_node > 1 ? ", " + io::format_bytes(need) + " for the " + std::to_string(on_node) +
                                   " ranks on this node"
                             : std::string()) +
                ", more than the " + io::format_bytes(static_cast<double>(available.bytes)) + " available (" +
                available.source + "); refused before allocating. Choose a smaller size");
}

/// Parses an integer >= `min`; throws naming `what`.
inline long long parse_count(const std::string& text, const std::string& what, long long min) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  HPCTRAIN_REQUIRE(errno == 0 && end != text.c_str() && *end == '\0' && v >= min,
                   what + "='" + text + "' must be an integer >= " + std::to_string(min));
  return v;
}

/// A flag's value, else the environment variable's, else `fallback`.
inline std::optional<std::string> flag_or_env(const std::optional<std::string>& flag,
                                              const char* env) {
  if (flag) return flag;
  const char* v = std::getenv(env);
  if (v && *v) return std::string(v);
  return std::nullopt;
}

/// Discards everything: the reporter of ranks > 0.
class NullReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
  void Finalize() override {}
};

/// Initialises Google Benchmark from argv and runs the registered benchmarks. Rank 0 reports
/// with the reporter `--benchmark_format` selects (and writes `--benchmark_out`); every other
/// rank's output is discarded and its `--benchmark_out*` arguments removed. Call after the
/// binary has taken its own flags out of argv. Returns false (on every rank) if argv held an
/// unknown argument.
inline bool run_benchmarks(int& argc, char** argv, MPI_Comm comm) {
  const int rank = rank_of(comm);
  if (rank != 0) {
    take_flag(argc, argv, "benchmark_out");
    take_flag(argc, argv, "benchmark_out_format");
  }
  // Under mpirun, rank 0's stdout is often a pty even when the job's output goes to a file, so
  // Google Benchmark's "auto" colour would put escape codes into logs: colour only on request.
  std::vector<char*> args(argv, argv + argc);
  static char no_color[] = "--benchmark_color=false";
  if (!peek_flag(argc, argv, "benchmark_color")) args.push_back(no_color);
  int args_count = static_cast<int>(args.size());
  args.push_back(nullptr);
  benchmark::Initialize(&args_count, args.data());
  int unknown = benchmark::ReportUnrecognizedArguments(args_count, args.data()) ? 1 : 0;
  int any_unknown = 0;
  HPCTRAIN_CHECK_MPI(MPI_Allreduce(&unknown, &any_unknown, 1, MPI_INT, MPI_MAX, comm));
  if (any_unknown) return false;
  if (rank == 0) {
    benchmark::RunSpecifiedBenchmarks();
  } else {
    NullReporter discard;
    benchmark::RunSpecifiedBenchmarks(&discard);
  }
  benchmark::Shutdown();
  return true;
}

}  // namespace hpctrain::bench
