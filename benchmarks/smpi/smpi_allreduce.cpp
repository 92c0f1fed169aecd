// smpi_allreduce: hpctrain's all-reduce algorithms and MPI_Allreduce under SimGrid's SMPI
// (docs/simulation.md). Built by scripts/smpi-build.sh with smpicxx; run by smpirun:
//
//   smpirun -np P -platform PLATFORM.xml -hostfile HOSTS build/smpi/bin/smpi_allreduce
//               [--cfg=...] [--algorithms=LIST] [--sizes=LIST] [--iters=N] [--check]
//
//   --algorithms  comma list of: ring, tree, recursive_doubling, rabenseifner, shm,
//                 hierarchical, auto (the cost model's pick), mpi (SMPI's MPI_Allreduce, whose
//                 algorithm smpirun's --cfg=smpi/coll-selector:ompi|mpich or
//                 --cfg=smpi/allreduce:NAME chooses), reproducible (allreduce_reproducible of
//                 float32 over the ring), nonblocking (iallreduce + wait over the ring: the
//                 progress thread). Default: all of them.
//   --sizes       comma list of byte counts (K, M, G suffixes: KiB, MiB, GiB). Default 8,64K,1M.
//   --iters       timed iterations per point (default 2; the simulation is deterministic, so
//                 more only confirm the figure); one untimed warm-up precedes them.
//   --check       every element of the result is compared with the exact sum (inputs are small
//                 integers: int32 (r + 1)·(i mod 7 + 1), float32 for reproducible); buffers are
//                 private per rank. Without --check the buffers come from SMPI_SHARED_MALLOC
//                 (all ranks share the same physical pages, so large P × large n fit in
//                 memory; their contents are then meaningless and not checked).
//   --fit-model=FILE  instead of all-reduces: fit the cost model's α and β the way `hpctrain
//                 tune-collectives` does (ping-pong between rank 0 and the first rank of another
//                 node, here rank 1 as every rank is its own host, over the collectives' own
//                 transport at 8 B .. 4 MiB, half the round trip, best of 3; α = the 8 B time,
//                 β = the least-squares slope over the sizes from 32 KiB), for both the intra-
//                 and inter-node parameters, γ = 0 (the study runs with
//                 smpi/simulate-computation:no, so a reduction takes no simulated time), and
//                 write the tuning file FILE. The 8 B time to rank P-1 (the farthest host) is
//                 printed beside it (far_alpha_s), not used.
//   --nodes-per-switch=N  with --fit-model: hosts under one leaf switch (the platform's layout;
//                 one rank per host). The fit then also measures the far tier: alpha_far_s = the
//                 mean 8 B time from rank 0 to the first and last rank of each other switch group
//                 (up to 8 groups), and far_beta_scale = the time for every rank of group 0
//                 to exchange 4 MiB with its counterpart in group 1 at once over the time for
//                 one such pair alone (at least 1; 1 when P < 2N), and writes them with
//                 nodes_per_switch into FILE.
//   --predict=P,..  instead of all-reduces: print the cost model's prediction (the tuning of
//                 HPCTRAIN_TUNING_FILE) for each rank count, size and algorithm, one rank per
//                 node, without simulating (`prediction ...` lines; run it with -np 1).
//
// Output (rank 0, stdout), one line per point, for scripts/simulate-collectives and tests/smpi:
//   result algo=ring ranks=64 bytes=65536 time_s=1.234e-05 check=ok|skipped|wrong:N chosen=ring
//          predicted_s=1.1e-05
//   fit alpha_s=... beta_s_per_byte=... points=8:t,64:t,...
//   unsupported algo=shm ranks=64 reason=<the library's error message>
// time_s is the simulated time of one all-reduce: per iteration the slowest rank's MPI_Wtime
// difference (after a barrier) over 8 back-to-back calls up to 64 KiB (1 above, and with
// --check), divided by the calls, the smallest over the iterations. chosen= is what `auto`
// resolved to (Tuning::choose_allreduce) for auto, else the algorithm itself; predicted_s is the
// cost model's time (Tuning::predict_allreduce_s with the tuning of HPCTRAIN_TUNING_FILE, for
// the chosen algorithm; "nan" for mpi, reproducible and nonblocking). Exit status 1
// when any check fails; an algorithm that cannot run under SMPI throws the same hpctrain::Error
// on every rank (before any message), is reported as `unsupported` and the run goes on.

#include <mpi.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "hpctrain/base/error.hpp"
#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/collectives/mpi_transport.hpp"
#include "hpctrain/collectives/transport.hpp"
#include "hpctrain/collectives/tuning.hpp"

namespace {

using hpctrain::coll::Algorithm;
using hpctrain::coll::Communicator;
using hpctrain::coll::DataType;
using hpctrain::coll::ReduceOp;

struct Options {
  std::vector<std::string> algorithms{"ring", "tree",         "recursive_doubling", "rabenseifner", "shm",
                                      "hierarchical", "auto", "mpi", "reproducible", "nonblocking"};
  std::vector<std::size_t> sizes{8, std::size_t{64} << 10, std::size_t{1} << 20};
  int iters = 2;
  bool check = false;
  std::string fit_model_file;  // --fit-model=FILE
  std::size_t nodes_per_switch = 0;  // --nodes-per-switch=N (with --fit-model)
  std::vector<int> predict_ranks;  // --predict=P,...
};

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty()) out.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const char* flag) -> const char* {
      const std::size_t n = std::strlen(flag);
      return arg.compare(0, n, flag) == 0 ? argv[i] + n : nullptr;
    };
    if (const char* v = value("--algorithms=")) {
      o.algorithms = split_list(v);
    } else if (const char* v = value("--sizes=")) {
      o.sizes.clear();
      for (const auto& s : split_list(v)) o.sizes.push_back(hpctrain::coll::parse_byte_count(s, "--sizes"));
    } else if (const char* v = value("--iters=")) {
      o.iters = std::max(1, std::atoi(v));
    } else if (const char* v = value("--predict=")) {
      for (const auto& r : split_list(v)) o.predict_ranks.push_back(std::atoi(r.c_str()));
    } else if (const char* v = value("--fit-model=")) {
      o.fit_model_file = v;
    } else if (const char* v = value("--nodes-per-switch=")) {
      char* end = nullptr;
      const long n = std::strtol(v, &end, 10);
      HPCTRAIN_REQUIRE(*v && *end == '\0' && n >= 0,
                       std::string("smpi_allreduce: --nodes-per-switch must be a whole number >= 0 (got '") + v + "')");
      o.nodes_per_switch = static_cast<std::size_t>(n);
    } else if (arg == "--check") {
      o.check = true;
    } else {
      HPCTRAIN_FAIL("smpi_allreduce: unknown argument '" + arg +
                    "' (--algorithms=LIST --sizes=LIST --iters=N --check --fit-model=FILE --nodes-per-switch=N "
                    "--predict=P,..; see the file comment)");
    }
  }
  return o;
}

/// A buffer of `bytes`: private (checked runs) or SMPI-shared among all ranks (timing runs).
class Buffer {
 public:
  Buffer(std::size_t bytes, bool shared) : shared_(shared) {
    const std::size_t n = std::max<std::size_t>(bytes, 8);
    data_ = shared ? SMPI_SHARED_MALLOC(n) : std::malloc(n);
    HPCTRAIN_REQUIRE(data_ != nullptr, "smpi_allreduce: cannot allocate " + std::to_string(n) + " bytes");
  }
  ~Buffer() {
    if (shared_) SMPI_SHARED_FREE(data_);
    else std::free(data_);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void* get() const noexcept { return data_; }

 private:
  bool shared_;
  void* data_;
};

// Inputs: element i of rank r is (r + 1)·(i mod 7 + 1), so the sum over P ranks is
// P(P + 1)/2 · (i mod 7 + 1), exact in int32 for P <= 4096 and in float32 for P <= 512.
template <class T>
void fill(T* x, std::size_t n, int rank) {
  for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<T>((rank + 1) * static_cast<int>(i % 7 + 1));
}
template <class T>
long long count_wrong(const T* x, std::size_t n, int ranks) {
  const long long base = static_cast<long long>(ranks) * (ranks + 1) / 2;
  long long wrong = 0;
  for (std::size_t i = 0; i < n; ++i) wrong += x[i] != static_cast<T>(base * static_cast<long long>(i % 7 + 1));
  return wrong;
}

/// One all-reduce of `count` elements in place in `buf` with the named method.
void run_one(Communicator& comm, const std::string& method, void* buf, std::size_t count) {
  if (method == "mpi") {
    // SMPI's own MPI_Allreduce, called directly (the selector decides the algorithm).
    MPI_Allreduce(MPI_IN_PLACE, buf, static_cast<int>(count), MPI_INT32_T, MPI_SUM, MPI_COMM_WORLD);
  } else if (method == "reproducible") {
    auto* f = static_cast<float*>(buf);
    comm.allreduce_reproducible(f, f, count, Algorithm::ring);
  } else if (method == "nonblocking") {
    comm.iallreduce(static_cast<std::int32_t*>(buf), count, ReduceOp::sum, Algorithm::ring).wait();
  } else {
    comm.allreduce(buf, buf, count, DataType::i32, ReduceOp::sum, hpctrain::coll::parse_algorithm(method, "--algorithms"));
  }
}

struct Point {
  double time_s = std::numeric_limits<double>::infinity();
  long long wrong = -1;  // -1: not checked
};

Point measure(Communicator& comm, const std::string& method, std::size_t bytes, const Options& o) {
  const bool is_float = method == "reproducible";
  const std::size_t count = bytes / 4;
  Buffer buf(bytes, !o.check);
  // Up to 64 KiB, 8 back-to-back calls per timed region: the barrier before it releases ranks
  // microseconds apart (more across the spine), which one latency-bound call would count.
  const int reps = o.check || bytes > (std::size_t{64} << 10) ? 1 : 8;
  Point p;
  for (int it = -1; it < o.iters; ++it) {
    if (o.check) {
      if (is_float) fill(static_cast<float*>(buf.get()), count, comm.rank());
      else fill(static_cast<std::int32_t*>(buf.get()), count, comm.rank());
    }
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    for (int k = 0; k < reps; ++k) run_one(comm, method, buf.get(), count);
    double dt = (MPI_Wtime() - t0) / reps;
    MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (it >= 0) p.time_s = std::min(p.time_s, dt);
  }
  if (o.check) {
    long long wrong = is_float ? count_wrong(static_cast<const float*>(buf.get()), count, comm.size())
                               : count_wrong(static_cast<const std::int32_t*>(buf.get()), count, comm.size());
    MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    p.wrong = wrong;
  }
  return p;
}

/// Ranks per node as `auto` sees them: the most ranks sharing one simulated host (or
/// HPCTRAIN_RANKS_PER_NODE). Collective.
int ranks_per_node(const Communicator& comm) {
  int per_node = 0;
  {
    // The node layout auto sees: ranks sharing this rank's simulated host, the largest count.
    MPI_Comm shared = MPI_COMM_NULL;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, comm.rank(), MPI_INFO_NULL, &shared);
    MPI_Comm_size(shared, &per_node);
    MPI_Comm_free(&shared);
    MPI_Allreduce(MPI_IN_PLACE, &per_node, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  }
  if (comm.tuning().ranks_per_node > 0) per_node = comm.tuning().ranks_per_node;
  return per_node;
}

std::string chosen_algorithm(const Communicator& comm, const std::string& method, std::size_t bytes, int per_node) {
  if (method != "auto") return method;
  return std::string(hpctrain::coll::to_string(comm.tuning().choose_allreduce(bytes, comm.size(), per_node)));
}

double predicted_s(const Communicator& comm, const std::string& chosen, std::size_t bytes, int per_node) {
  if (chosen == "mpi" || chosen == "reproducible" || chosen == "nonblocking") return std::nan("");
  return comm.tuning().predict_allreduce_s(hpctrain::coll::parse_algorithm(chosen), bytes, comm.size(), per_node);
}

/// Half the round trip of `bytes` between ranks 0 and `peer` over the communicator's transport,
/// best of `reps` timed round trips after one untimed one (the measurement of tune-collectives).
/// Rank 0 times each round trip on its own clock, so the skew with which the ranks leave the
/// barrier (which grows with P: at 256 ranks it added 1 µs to the 2 µs of rank 0 <-> 1 when the
/// clock started at the barrier) does not enter. Ranks other than 0 and peer wait.
double pingpong_s(Communicator& comm, int peer, std::size_t bytes, int reps) {
  std::vector<std::byte> buf(std::max<std::size_t>(bytes, 1));
  auto& t = comm.transport();
  hpctrain::coll::WaitPolicy policy;
  policy.what = "ping-pong";
  double best = std::numeric_limits<double>::infinity();
  MPI_Barrier(MPI_COMM_WORLD);
  if (comm.rank() == 0 || comm.rank() == peer) {
    const int other = comm.rank() == 0 ? peer : 0;
    for (int r = 0; r <= reps; ++r) {
      const double t0 = MPI_Wtime();
      for (int leg = 0; leg < 2; ++leg) {
        const bool sending = (leg == 0) == (comm.rank() == 0);
        hpctrain::coll::Request req = sending ? t.isend(buf.data(), bytes, other, 7) : t.irecv(buf.data(), bytes, other, 7);
        hpctrain::coll::wait_all(t, &req, 1, policy);
      }
      if (r > 0) best = std::min(best, (MPI_Wtime() - t0) / 2);  // round 0 lines the two ranks up
    }
  }
  MPI_Bcast(&best, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  return best;
}

/// Seconds for the ranks r < `pairs` to exchange `bytes` with r + group at the same time (each
/// sends and receives), the slowest of them, best of 3 after one untimed exchange. Ranks outside
/// the pairs wait.
double group_exchange_s(Communicator& comm, int group, int pairs, std::size_t bytes) {
  std::vector<std::byte> out(bytes), in(bytes);
  auto& t = comm.transport();
  hpctrain::coll::WaitPolicy policy;
  policy.what = "group exchange";
  const int r = comm.rank();
  const bool mine = r < pairs || (r >= group && r < group + pairs);
  const int peer = r < group ? r + group : r - group;
  double best = std::numeric_limits<double>::infinity();
  for (int rep = 0; rep <= 3; ++rep) {
    MPI_Barrier(MPI_COMM_WORLD);
    double mine_s = 0.0;
    if (mine) {
      const double t0 = MPI_Wtime();
      std::array<hpctrain::coll::Request, 2> reqs = {t.irecv(in.data(), bytes, peer, 8), t.isend(out.data(), bytes, peer, 8)};
      hpctrain::coll::wait_all(t, reqs.data(), reqs.size(), policy);
      mine_s = MPI_Wtime() - t0;
    }
    double slowest = 0.0;
    MPI_Allreduce(&mine_s, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (rep > 0) best = std::min(best, slowest);
  }
  return best;
}

/// --fit-model: α and β from the ping-pong (see the file comment), written as a tuning file.
int fit_model(Communicator& comm, const std::string& file, std::size_t nodes_per_switch) {
  HPCTRAIN_REQUIRE(comm.size() >= 2, "--fit-model needs at least 2 ranks");
  const int group = static_cast<int>(nodes_per_switch);  // one rank per host
  HPCTRAIN_REQUIRE(nodes_per_switch == 0 || group < comm.size(),
                   "--fit-model with --nodes-per-switch=" + std::to_string(nodes_per_switch) + " needs more than " +
                       std::to_string(nodes_per_switch) + " ranks (a rank under another switch)");
  std::vector<std::pair<double, double>> points;
  for (std::size_t b = 8; b <= (std::size_t{4} << 20); b *= 8) points.emplace_back(b, pingpong_s(comm, 1, b, 3));
  points.emplace_back(std::size_t{4} << 20, pingpong_s(comm, 1, std::size_t{4} << 20, 3));
  const double far_alpha = pingpong_s(comm, comm.size() - 1, 8, 3);
  // The far tier: the mean 8 B time from rank 0 to the first and the last rank of every other
  // switch group (up to 8 groups; routes across a spine differ in length).
  double far_mean = 0.0;
  int far_pairs = 0;
  if (group > 0) {
    for (int g = 1; g * group < comm.size() && g <= 8; ++g) {
      for (int peer : {g * group, std::min(comm.size(), (g + 1) * group) - 1}) {
        far_mean += pingpong_s(comm, peer, 8, 3);
        ++far_pairs;
      }
    }
    far_mean /= far_pairs;
  }
  // The far tier's shared links: every rank of switch group 0 exchanging 4 MiB with its
  // counterpart in group 1 at once, against one such pair alone.
  double far_share = 1.0;
  if (group > 0 && 2 * group <= comm.size()) {
    constexpr std::size_t kShareBytes = std::size_t{4} << 20;
    far_share = std::max(1.0, group_exchange_s(comm, group, group, kShareBytes) /
                                  group_exchange_s(comm, group, 1, kShareBytes));
  }
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [x, y] : points) {
    if (x < 32768) continue;
    n += 1, sx += x, sy += y, sxx += x * x, sxy += x * y;
  }
  const double beta = (n * sxy - sx * sy) / (n * sxx - sx * sx);
  const double alpha = points.front().second;
  hpctrain::coll::Tuning t = comm.tuning();
  t.model.alpha_intra_s = t.model.alpha_inter_s = alpha;
  t.model.beta_intra_s_per_byte = t.model.beta_inter_s_per_byte = beta;
  t.model.gamma_s_per_byte = 0.0;
  t.model.nodes_per_switch = nodes_per_switch;
  t.model.alpha_far_s = far_mean;
  t.model.far_beta_scale = far_share;
  std::string pts;
  for (const auto& [x, y] : points) pts += (pts.empty() ? "" : ",") + std::to_string(static_cast<long>(x)) + ":" + std::to_string(y);
  if (comm.rank() == 0) {
    t.save(file, "{\"source\": \"smpi_allreduce --fit-model: ping-pong 0<->1 under SMPI, gamma 0 "
                 "(simulate-computation:no)\"}");
    std::printf("fit alpha_s=%.6e beta_s_per_byte=%.6e far_alpha_s=%.6e alpha_far_s=%.6e far_beta_scale=%.3f "
                "nodes_per_switch=%zu far_pairs=%d points=%s file=%s\n",
                alpha, beta, far_alpha, far_mean, far_share, nodes_per_switch, far_pairs, pts.c_str(), file.c_str());
  }
  return 0;
}

/// --predict: the model's time for every (P, size, algorithm), one rank per node; `auto` is the
/// prediction of the algorithm it chooses.
int predict(const hpctrain::coll::Tuning& tuning, const Options& o) {
  for (int p : o.predict_ranks) {
    for (const auto& method : o.algorithms) {
      if (method == "mpi" || method == "reproducible" || method == "nonblocking") continue;
      for (std::size_t bytes : o.sizes) {
        const Algorithm a = method == "auto" ? tuning.choose_allreduce(bytes, p, 1) : hpctrain::coll::parse_algorithm(method);
        std::printf("prediction algo=%s ranks=%d bytes=%zu predicted_s=%.6e chosen=%s\n", method.c_str(), p, bytes,
                    tuning.predict_allreduce_s(a, bytes, p, 1), std::string(hpctrain::coll::to_string(a)).c_str());
      }
    }
  }
  return 0;
}

int run(int argc, char** argv) {
  const Options o = parse_options(argc, argv);
  Communicator comm(hpctrain::coll::make_mpi_transport(MPI_COMM_WORLD));
  if (!o.fit_model_file.empty()) return fit_model(comm, o.fit_model_file, o.nodes_per_switch);
  if (!o.predict_ranks.empty()) return predict(comm.tuning(), o);
  const bool root = comm.rank() == 0;
  const int per_node = ranks_per_node(comm);
  bool failed = false;
  for (const auto& method : o.algorithms) {
    for (std::size_t bytes : o.sizes) {
      bytes = std::max<std::size_t>(4, bytes / 4 * 4);
      const std::string chosen = chosen_algorithm(comm, method, bytes, per_node);
      Point p;
      try {
        p = measure(comm, method, bytes, o);
      } catch (const hpctrain::Error& e) {
        // The SMPI refusals are raised on every rank before any message, so all ranks are here.
        if (root) std::printf("unsupported algo=%s ranks=%d reason=%s\n", method.c_str(), comm.size(), e.what());
        std::fflush(stdout);
        break;
      }
      const bool wrong = p.wrong > 0;
      failed = failed || wrong;
      if (root) {
        std::string check = p.wrong < 0 ? "skipped" : wrong ? "wrong:" + std::to_string(p.wrong) : "ok";
        std::printf("result algo=%s ranks=%d bytes=%zu time_s=%.6e check=%s chosen=%s predicted_s=%.6e\n",
                    method.c_str(), comm.size(), bytes, p.time_s, check.c_str(), chosen.c_str(),
                    predicted_s(comm, chosen, bytes, per_node));
        std::fflush(stdout);
      }
    }
  }
  return failed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rc = 0;
  try {
    rc = run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "smpi_allreduce: error: %s\n", e.what());
    rc = 2;
  }
  MPI_Finalize();
  return rc;
}
