// `hpctrain tune-collectives`: the measurements behind the all-reduce cost model.
//
// What is measured (every figure is the median or best of repetitions, see below), with the
// model parameter it sets (collectives/include/hpctrain/collectives/tuning.hpp):
//  * α, β (intra- and inter-node): ping-pong over the transport the collectives use
//    (HPCTRAIN_TRANSPORT) between rank 0 and the next rank on its node (intra) and the first
//    rank on another node (inter; nodes are the real ones, or HPCTRAIN_RANKS_PER_NODE virtual
//    ones), sizes 8 B .. 4 MiB, the fastest half round trip per size (see half_round_trip_s). α = the 8-byte half round
//    trip, β = the least-squares slope over the sizes from 32 KiB. The other ranks wait.
//    Without a second node the inter-node figures are the intra-node ones (and vice versa).
//  * γ: every rank times the reduction kernel the algorithms run (float32 sum, 16 MiB, best of
//    5) at the same time, as in a ring step; the slowest rank's seconds per byte.
//  * shm copy bandwidth: every rank memcpy's 64 MiB at the same time (best of 5); the slowest
//    rank's seconds per byte.
//  * shm sync: first a barrier of the ranks of one node (MPI_Barrier over MPI_COMM_TYPE_SHARED,
//    or the virtual node); then, when shm runs on the layout, the median 8 B shm all-reduce (its
//    one-step path is one flag round), which replaces it.
//  * overhead per call: each algorithm's median 8 B time minus its formula (at least 0).
//  * calibration: each algorithm timed at 64 KiB .. 64 MiB; measured / modelled byte cost.

#include "tune_collectives.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hpctrain/base/error.hpp"
#include "hpctrain/base/mpi_handle.hpp"
#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/collectives/mpi_transport.hpp"  // HPCTRAIN_CHECK_MPI
#include "hpctrain/collectives/reduce.hpp"
#include "hpctrain/collectives/transport.hpp"
#include "hpctrain/collectives/transport_factory.hpp"
#include "hpctrain/collectives/tuning.hpp"

namespace hpctrain::cli {

namespace {

using coll::Algorithm;
using coll::Tuning;

constexpr coll::Algorithm kTableAlgorithms[] = {Algorithm::ring, Algorithm::tree, Algorithm::recursive_doubling,
                                                Algorithm::rabenseifner, Algorithm::shm, Algorithm::hierarchical};


std::string human_bytes(std::size_t b) {
  if (b >= (std::size_t{1} << 30) && b % (std::size_t{1} << 30) == 0) return std::to_string(b >> 30) + " GiB";
  if (b >= (1u << 20) && b % (1u << 20) == 0) return std::to_string(b >> 20) + " MiB";
  if (b >= (1u << 10) && b % (1u << 10) == 0) return std::to_string(b >> 10) + " KiB";
  return std::to_string(b) + " B";
}

// ---- measurements ------------------------------------------------------------------------------

void wait(coll::Transport& t, coll::Request& r) {
  while (!t.test(r)) {
  }
}

/// Fastest half round trip (seconds) of `bytes` between this rank and `peer` over `reps` round
/// trips after a few warm-ups; `initiator` sends first. Only the two ranks call it. The minimum,
/// not the median: on a shared machine a round trip that lost the core to a neighbour measures
/// the neighbour (a 2 MiB half round trip measured 0.23 ms in one run here and 7 ms as the
/// median of another, under a load average of 16); the model wants what the link can do.
double half_round_trip_s(coll::Transport& t, int peer, bool initiator, std::size_t bytes, int reps) {
  std::vector<std::byte> buf(std::max<std::size_t>(bytes, 1));
  const coll::Tag tag = 77;
  const int warmup = std::max(2, reps / 10);
  std::vector<double> times;
  for (int i = 0; i < warmup + reps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    if (initiator) {
      coll::Request s = t.isend(buf.data(), bytes, peer, tag);
      wait(t, s);
      coll::Request r = t.irecv(buf.data(), bytes, peer, tag);
      wait(t, r);
    } else {
      coll::Request r = t.irecv(buf.data(), bytes, peer, tag);
      wait(t, r);
      coll::Request s = t.isend(buf.data(), bytes, peer, tag);
      wait(t, s);
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (i >= warmup) times.push_back(s / 2);
  }
  return *std::min_element(times.begin(), times.end());
}

struct LinkFit {
  double alpha_s = 0, beta_s_per_byte = 0;
  std::vector<std::pair<std::size_t, double>> points;  // (bytes, half round trip s)
};

/// Ping-pong between ranks `a` and `b` (collective over `comm`: the others wait at a barrier).
/// The fit is valid on every rank (broadcast from `a`).
LinkFit measure_link(coll::Transport& t, MPI_Comm comm, int a, int b, const std::vector<std::size_t>& sizes, int reps) {
  const int me = t.rank();
  LinkFit fit;
  std::vector<double> times(sizes.size(), 0.0);
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    HPCTRAIN_CHECK_MPI(MPI_Barrier(comm));
    // Large messages: fewer repetitions (each already takes long enough to time).
    const int r = sizes[i] >= (std::size_t{1} << 20) ? std::max(3, reps / 5) : reps;
    if (me == a) times[i] = half_round_trip_s(t, b, true, sizes[i], r);
    else if (me == b) (void)half_round_trip_s(t, a, false, sizes[i], r);
  }
  HPCTRAIN_CHECK_MPI(MPI_Bcast(times.data(), static_cast<int>(times.size()), MPI_DOUBLE, a, comm));
  for (std::size_t i = 0; i < sizes.size(); ++i) fit.points.emplace_back(sizes[i], times[i]);
  // β: least-squares slope over the bandwidth-bound sizes (>= 32 KiB).
  double sx = 0, sy = 0, sxx = 0, sxy = 0, n = 0;
  for (const auto& [bytes, s] : fit.points) {
    if (bytes < (std::size_t{32} << 10)) continue;
    const double x = static_cast<double>(bytes);
    sx += x, sy += s, sxx += x * x, sxy += x * s, n += 1;
  }
  const double denom = n * sxx - sx * sx;
  double beta = (n >= 2 && denom > 0) ? (n * sxy - sx * sy) / denom : 0.0;
  if (!(beta > 0)) beta = fit.points.back().second / static_cast<double>(fit.points.back().first);  // noise
  fit.beta_s_per_byte = beta;
  fit.alpha_s = fit.points.front().second;  // the smallest size: 8 B, whose byte term is ~8β
  return fit;
}

/// Seconds per byte of `body(bytes)` run by every rank at the same time, best of `reps` per
/// rank, the slowest rank's figure (collective).
template <class Body>
double concurrent_s_per_byte(MPI_Comm comm, std::size_t bytes, int reps, Body&& body) {
  double best = std::numeric_limits<double>::infinity();
  for (int i = 0; i < reps + 1; ++i) {  // the first is a warm-up
    HPCTRAIN_CHECK_MPI(MPI_Barrier(comm));
    const double t0 = MPI_Wtime();
    body();
    const double s = MPI_Wtime() - t0;
    if (i > 0) best = std::min(best, s);
  }
  double slowest = 0;
  HPCTRAIN_CHECK_MPI(MPI_Allreduce(&best, &slowest, 1, MPI_DOUBLE, MPI_MAX, comm));
  return slowest / static_cast<double>(bytes);
}

// ---- prediction table --------------------------------------------------------------------------

void print_prediction(const Tuning& t, int ranks_per_node, int nodes_max, const std::vector<std::size_t>& sizes) {
  std::printf("\n# predicted all-reduce time in microseconds, %d ranks per node; * = the cost model's choice "
              "(automatic); - = cannot run on that layout\n",
              ranks_per_node);
  std::printf("# model: %s\n", t.tuning_file.empty() ? "built-in defaults" : t.tuning_file.c_str());
  std::printf("#%9s %6s %8s", "size", "nodes", "ranks");
  for (Algorithm a : kTableAlgorithms) std::printf(" %19s", std::string(to_string(a)).c_str());
  std::printf("  %s\n", "choice");
  for (std::size_t bytes : sizes) {
    for (long long nodes = 1; nodes <= nodes_max; nodes *= 2) {
      const long long ranks = nodes * ranks_per_node;
      if (ranks > std::numeric_limits<int>::max()) break;
      const int p = static_cast<int>(ranks);
      const Algorithm choice = t.choose_allreduce(bytes, p, ranks_per_node);
      std::printf(" %9s %6lld %8d", human_bytes(bytes).c_str(), nodes, p);
      for (Algorithm a : kTableAlgorithms) {
        const double s = t.predict_allreduce_s(a, bytes, p, ranks_per_node);
        if (std::isinf(s)) std::printf(" %19s", "-");
        else std::printf(" %18.1f%c", s * 1e6, a == choice ? '*' : ' ');
      }
      std::printf("  %s\n", std::string(to_string(choice)).c_str());
      if (nodes > nodes_max / 2) break;
    }
  }
  std::fflush(stdout);
}

/// Median over `reps` calls of the slowest rank's time of one `algo` all-reduce of `bytes`
/// (float32 sum, in place), after two untimed calls.
double allreduce_median_s(coll::Communicator& comm, MPI_Comm mpi, Algorithm algo, std::size_t bytes, int reps) {
  std::vector<float> buf(bytes / sizeof(float), 1.0f);
  for (int i = 0; i < 2; ++i) comm.allreduce(buf.data(), buf.size(), coll::ReduceOp::sum, algo);
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    HPCTRAIN_CHECK_MPI(MPI_Barrier(mpi));
    const double t0 = MPI_Wtime();
    comm.allreduce(buf.data(), buf.size(), coll::ReduceOp::sum, algo);
    double mine = MPI_Wtime() - t0, slowest = 0;
    HPCTRAIN_CHECK_MPI(MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, mpi));
    times.push_back(slowest);
  }
  std::nth_element(times.begin(), times.begin() + reps / 2, times.end());
  return times[static_cast<std::size_t>(reps / 2)];
}

std::vector<std::size_t> parse_sizes(const std::string& list) {
  std::vector<std::size_t> sizes;
  std::stringstream in(list);
  for (std::string s; std::getline(in, s, ',');) {
    if (!s.empty()) sizes.push_back(coll::parse_byte_count(s, "--predict-sizes"));
  }
  HPCTRAIN_REQUIRE(!sizes.empty(), "--predict-sizes: '" + list + "' names no size");
  return sizes;
}

/// Which node every rank is on: HPCTRAIN_RANKS_PER_NODE virtual nodes, else the shared-memory
/// domains. Collective over `comm`; owns (and frees) the node communicator.
class NodeLayout {
 public:
  NodeLayout(MPI_Comm comm, int virtual_ranks_per_node) {
    MPI_Comm node_comm = MPI_COMM_NULL;
    int rank = 0, size = 1;
    HPCTRAIN_CHECK_MPI(MPI_Comm_rank(comm, &rank));
    HPCTRAIN_CHECK_MPI(MPI_Comm_size(comm, &size));
    if (virtual_ranks_per_node > 0) {
      HPCTRAIN_CHECK_MPI(MPI_Comm_split(comm, rank / virtual_ranks_per_node, rank, &node_comm));
    } else {
      HPCTRAIN_CHECK_MPI(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node_comm));
    }
    node = MpiCommHandle(node_comm);
    int node_leader = rank;
    HPCTRAIN_CHECK_MPI(MPI_Allreduce(&rank, &node_leader, 1, MPI_INT, MPI_MIN, node_comm));
    std::vector<int> leaders(static_cast<std::size_t>(size));
    HPCTRAIN_CHECK_MPI(MPI_Allgather(&node_leader, 1, MPI_INT, leaders.data(), 1, MPI_INT, comm));
    for (int r = 1; r < size; ++r) {
      if (leaders[static_cast<std::size_t>(r)] == leaders[0] && intra_peer < 0) intra_peer = r;
      if (leaders[static_cast<std::size_t>(r)] != leaders[0] && inter_peer < 0) inter_peer = r;
    }
    HPCTRAIN_CHECK_MPI(MPI_Comm_size(node_comm, &node_size));
    for (int r = 0; r < size; ++r) nodes += leaders[static_cast<std::size_t>(r)] == r;
    host0 = processor_name_of(comm, 0);
    if (inter_peer > 0) inter_host = processor_name_of(comm, inter_peer);
  }

  MpiCommHandle node;  ///< the ranks of this rank's node
  int intra_peer = -1;  ///< first other rank on rank 0's node (-1: none)
  int inter_peer = -1;  ///< first rank on another node (-1: one node)
  int node_size = 1;    ///< ranks on this rank's node
  int nodes = 0;
  std::string host0;       ///< MPI_Get_processor_name of rank 0 (known on every rank)
  std::string inter_host;  ///< ... of inter_peer: the far end of the inter-node link ("": none)

 private:
  /// `rank`'s MPI_Get_processor_name, broadcast to every rank of `comm` (collective).
  static std::string processor_name_of(MPI_Comm comm, int rank) {
    char name[MPI_MAX_PROCESSOR_NAME] = "";
    int len = 0, me = 0;
    HPCTRAIN_CHECK_MPI(MPI_Comm_rank(comm, &me));
    if (me == rank) HPCTRAIN_CHECK_MPI(MPI_Get_processor_name(name, &len));
    HPCTRAIN_CHECK_MPI(MPI_Bcast(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, rank, comm));
    name[MPI_MAX_PROCESSOR_NAME - 1] = '\0';
    return name;
  }
};

/// The per-byte costs every rank measures at once, as in a ring step: γ (reduction kernel),
/// the shm copy β, and the node barrier (the shm sync before calibration replaces it).
struct LocalCosts {
  double gamma_s_per_byte = 0, shm_beta_s_per_byte = 0, node_barrier_s = 0;
};

LocalCosts measure_local_costs(MPI_Comm comm, MPI_Comm node_comm, bool quick) {
  LocalCosts c;
  const std::size_t reduce_bytes = (quick ? std::size_t{4} : std::size_t{16}) << 20;
  const std::size_t copy_bytes = (quick ? std::size_t{16} : std::size_t{64}) << 20;
  const int buffer_reps = quick ? 3 : 5;
  std::vector<float> x(reduce_bytes / sizeof(float), 1.0f), y(reduce_bytes / sizeof(float), 0.5f);
  c.gamma_s_per_byte = concurrent_s_per_byte(comm, reduce_bytes, buffer_reps, [&] {
    coll::reduce_into(x.data(), y.data(), x.size(), coll::DataType::f32, coll::ReduceOp::sum);
  });
  std::vector<char> src(copy_bytes, 1), dst(copy_bytes, 0);
  c.shm_beta_s_per_byte = concurrent_s_per_byte(comm, copy_bytes, buffer_reps, [&] {
    std::memcpy(dst.data(), src.data(), copy_bytes);
  });
  const int barrier_reps = quick ? 200 : 2000;
  HPCTRAIN_CHECK_MPI(MPI_Barrier(node_comm));
  const double t0 = MPI_Wtime();
  for (int i = 0; i < barrier_reps; ++i) HPCTRAIN_CHECK_MPI(MPI_Barrier(node_comm));
  const double mine = (MPI_Wtime() - t0) / barrier_reps;
  HPCTRAIN_CHECK_MPI(MPI_Allreduce(&mine, &c.node_barrier_s, 1, MPI_DOUBLE, MPI_MAX, comm));
  double checksum = static_cast<double>(x[x.size() / 2]) + dst[copy_bytes / 2];  // keep the work
  (void)checksum;
  return c;
}

/// Calibration: every algorithm that runs on this layout, timed at a few sizes from in-cache to
/// streaming from memory; the ratio of its measured to its modelled byte cost is its scale there
/// (CostModel::calibration). The α terms stay as fitted by the ping-pong. Collective.
void calibrate(Tuning& t, int virtual_ranks_per_node, MPI_Comm comm, int size, int node_size, bool quick) {
  const std::vector<std::size_t> cal_sizes =
      quick ? std::vector<std::size_t>{std::size_t{64} << 10, std::size_t{1} << 20}
            : std::vector<std::size_t>{std::size_t{64} << 10, std::size_t{1} << 20, std::size_t{16} << 20,
                                       std::size_t{64} << 20};
  const int layout_rpn = virtual_ranks_per_node > 0 ? virtual_ranks_per_node : node_size;
  t.model.calibration_bytes.clear();
  for (auto& list : t.model.calibration_scale) list.clear();
  Tuning run = t;
  run.ranks_per_node = virtual_ranks_per_node;
  coll::Communicator cal_comm(coll::make_default_transport(comm), run);
  // Latency: the shm algorithm's one-step path at 8 B is its synchronisation (a barrier over MPI
  // costs more than its flags); every other algorithm's 8 B time beyond its formula becomes its
  // overhead_s (software cost per call the α of a ping-pong does not see).
  const int latency_reps = quick ? 50 : 500;
  if (node_size > 1 && std::isfinite(t.formula_s(Algorithm::shm, 8.0, size, layout_rpn))) {
    t.model.shm_sync_s = allreduce_median_s(cal_comm, comm, Algorithm::shm, 8, latency_reps);
  }
  for (Algorithm algo : kTableAlgorithms) {
    const double formula = t.formula_s(algo, 8.0, size, layout_rpn);
    if (!std::isfinite(formula)) continue;
    const double measured = allreduce_median_s(cal_comm, comm, algo, 8, latency_reps);
    t.model.overhead_s[static_cast<std::size_t>(algo)] = std::max(0.0, measured - formula);
  }
  for (std::size_t bytes : cal_sizes) t.model.calibration_bytes.push_back(static_cast<double>(bytes));
  for (Algorithm algo : kTableAlgorithms) {
    if (!std::isfinite(t.formula_s(algo, 1.0, size, layout_rpn))) continue;  // cannot run here
    auto& scale = t.model.calibration_scale[static_cast<std::size_t>(algo)];
    for (std::size_t bytes : cal_sizes) {
      const int cal_reps = static_cast<int>(std::clamp<std::size_t>((std::size_t{256} << 20) / bytes, 3, quick ? 5 : 20));
      const double n = static_cast<double>(bytes);
      const double measured = allreduce_median_s(cal_comm, comm, algo, bytes, cal_reps) -
                              t.model.overhead_s[static_cast<std::size_t>(algo)];
      const double latency = t.formula_s(algo, n, size, layout_rpn, 0.0);
      const double byte_terms = t.formula_s(algo, n, size, layout_rpn, 1.0) - latency;
      // Bounded, so one disturbed measurement cannot make an algorithm free or unusable.
      scale.push_back(std::clamp((measured - latency) / byte_terms, 0.05, 50.0));
    }
  }
}

/// What the tuning file records about the measurement (host, time, layout, raw points).
nlohmann::json measurement_metadata(const TuneArgs& a, const NodeLayout& layout, int size, bool virtual_nodes,
                                    const std::string& transport, const LinkFit& intra, const LinkFit& inter,
                                    const LocalCosts& costs) {
  nlohmann::json m;
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  const std::time_t now = std::time(nullptr);
  char when[32] = "";
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  m["host"] = host;
  m["time_utc"] = when;
  m["ranks"] = size;
  m["nodes"] = layout.nodes;
  m["ranks_per_node_of_rank0"] = layout.node_size;
  m["virtual_nodes"] = virtual_nodes;
  m["transport"] = transport;
  m["quick"] = a.quick;
  m["intra_pair"] = layout.intra_peer > 0 ? nlohmann::json::array({0, layout.intra_peer}) : nlohmann::json(nullptr);
  m["inter_pair"] = layout.inter_peer > 0 ? nlohmann::json::array({0, layout.inter_peer}) : nlohmann::json(nullptr);
  m["inter_hosts"] = layout.inter_peer > 0 ? nlohmann::json::array({layout.host0, layout.inter_host}) : nlohmann::json(nullptr);
  auto points = [](const LinkFit& f) {
    nlohmann::json j = nlohmann::json::object();
    for (const auto& [bytes, s] : f.points) j[std::to_string(bytes)] = s;
    return j;
  };
  m["half_round_trip_s"] = {{"intra", points(intra)}, {"inter", points(inter)}};
  m["reduce_GBps"] = 1e-9 / costs.gamma_s_per_byte;
  m["copy_GBps_per_rank"] = 1e-9 / costs.shm_beta_s_per_byte;
  return m;
}

/// Rank 0's summary of the fitted model (the lines check_tune_collectives.py reads).
void print_tuning(const Tuning& t, const TuneArgs& a, const NodeLayout& layout, int size, bool virtual_nodes,
                  const std::string& transport, const LinkFit& intra, const LinkFit& inter) {
  const int intra_peer = layout.intra_peer, inter_peer = layout.inter_peer, node_size = layout.node_size;
  std::printf("hpctrain tune-collectives: %d ranks, %d node(s)%s, transport %s%s\n", size, layout.nodes,
              virtual_nodes ? " (virtual, HPCTRAIN_RANKS_PER_NODE)" : "", transport.c_str(), a.quick ? ", quick" : "");
  std::printf("  alpha_intra  %10.3f us per message   (ping-pong 0<->%d%s)\n", intra.alpha_s * 1e6,
              intra_peer > 0 ? intra_peer : inter_peer, intra_peer > 0 ? "" : ", no second rank on node 0");
  std::printf("  beta_intra   %10.3f GB/s              (1/beta)\n", 1e-9 / intra.beta_s_per_byte);
  std::printf("  alpha_inter  %10.3f us per message   (%s)\n", inter.alpha_s * 1e6,
              inter_peer > 0 ? ("ping-pong 0<->" + std::to_string(inter_peer) + ", " + layout.host0 + " <-> " + layout.inter_host).c_str()
                             : "one node: = intra");
  std::printf("  beta_inter   %10.3f GB/s\n", 1e-9 / inter.beta_s_per_byte);
  std::printf("  gamma        %10.3f GB/s reduced per rank (float32 sum, all ranks at once)\n",
              1e-9 / t.model.gamma_s_per_byte);
  std::printf("  shm copy     %10.3f GB/s per rank (memcpy, all ranks at once)\n", 1e-9 / t.model.shm_beta_s_per_byte);
  std::printf("  shm sync     %10.3f us (%s)\n", t.model.shm_sync_s * 1e6,
              node_size > 1 ? ("the shm all-reduce of 8 B over " + std::to_string(node_size) + " node ranks").c_str()
                            : "one rank per node: not measured, kept from the input/defaults");
  std::printf("  overhead per call (8 B measured - formula):");
  for (Algorithm algo : kTableAlgorithms) {
    if (!t.model.calibration_scale[static_cast<std::size_t>(algo)].empty()) {
      std::printf(" %s %.2f us", std::string(to_string(algo)).c_str(), t.model.overhead_s[static_cast<std::size_t>(algo)] * 1e6);
    }
  }
  std::printf("\n");
  std::printf("  calibration (measured / modelled byte cost) at");
  for (double b : t.model.calibration_bytes) std::printf(" %s", human_bytes(static_cast<std::size_t>(b)).c_str());
  std::printf(":\n");
  for (Algorithm algo : kTableAlgorithms) {
    const auto& scale = t.model.calibration_scale[static_cast<std::size_t>(algo)];
    if (scale.empty()) continue;
    std::printf("    %-20s", std::string(to_string(algo)).c_str());
    for (double x : scale) std::printf(" %6.2f", x);
    std::printf("\n");
  }
  std::printf("  wrote %s (use HPCTRAIN_TUNING_FILE=%s)\n", a.output.c_str(), a.output.c_str());
}

}  // namespace

void add_tune_options(CLI::App& app, TuneArgs& a) {
  app.footer(
      "Measures, under mpirun/srun (2 or more ranks; ranks on two nodes also give the inter-node "
      "figures), the parameters of the cost model that Algorithm::automatic uses to pick an "
      "all-reduce algorithm: alpha (s per message) and beta (s per byte) by ping-pong over the "
      "transport (HPCTRAIN_TRANSPORT) within a node and between nodes (real nodes, or "
      "HPCTRAIN_RANKS_PER_NODE virtual ones), gamma (s per byte reduced) by timing the reduction "
      "kernel, and the shared-memory copy bandwidth and node barrier time. Rank 0 writes them to "
      "--output; load it with HPCTRAIN_TUNING_FILE=<file>. With --predict-ranks-per-node K it "
      "prints the model's time per algorithm for 1, 2, 4, ... --predict-nodes-max nodes of K ranks, "
      "so the winner at scale is known before the allocation. --predict-only (with --input, or "
      "HPCTRAIN_TUNING_FILE, or the defaults) measures nothing and needs no mpirun.\n"
      "Examples:\n"
      "  mpirun -n 4 hpctrain tune-collectives --output tuning.json\n"
      "  hpctrain tune-collectives --predict-only --input tuning.json --predict-ranks-per-node 8");
  app.add_option("--output", a.output, "Tuning file to write (rank 0)")->capture_default_str();
  app.add_option("--input", a.input,
                 "Tuning file to start from (its knobs are kept; the measured parameters replace its model)"
                 "; with --predict-only, the file to predict from");
  app.add_flag("--predict-only", a.predict_only, "Print the prediction table from --input; measure nothing");
  app.add_flag("--quick", a.quick, "Fewer repetitions and smaller buffers (seconds; for tests, noisier)");
  app.add_option("--reps", a.reps, "Ping-pong repetitions per size (default 50, --quick 10)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--predict-ranks-per-node", a.predict_ranks_per_node,
                 "Print predicted times for nodes of this many ranks (0: no table)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--predict-nodes-max", a.predict_nodes_max, "Largest node count of the table (1, 2, 4, ...)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--predict-sizes", a.predict_sizes, "Message sizes of the table (comma list, K/M/G suffixes)")
      ->capture_default_str();
}

int run_tune_collectives(const TuneArgs& a, MPI_Comm comm) {
  int rank = 0, size = 1;
  HPCTRAIN_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  HPCTRAIN_CHECK_MPI(MPI_Comm_size(comm, &size));
  const std::vector<std::size_t> sizes = parse_sizes(a.predict_sizes);
  Tuning base = a.input.empty() ? Tuning::from_environment() : Tuning::from_file(a.input, Tuning::from_environment());

  if (a.predict_only) {
    HPCTRAIN_REQUIRE(a.predict_ranks_per_node > 0,
                     "--predict-only needs --predict-ranks-per-node K (the table is all it prints)");
    if (rank == 0) print_prediction(base, a.predict_ranks_per_node, a.predict_nodes_max, sizes);
    return 0;
  }
  HPCTRAIN_REQUIRE(size >= 2, "tune-collectives measures between ranks: run it with 2 or more ranks "
                              "(mpirun -n 2 hpctrain tune-collectives), or pass --predict-only");
  const int reps = a.reps > 0 ? a.reps : (a.quick ? 10 : 50);
  const NodeLayout layout(comm, base.ranks_per_node);

  auto transport = coll::make_default_transport(comm);
  std::vector<std::size_t> ping_sizes;
  for (std::size_t b = 8; b <= (std::size_t{4} << 20); b *= a.quick ? 64 : 8) ping_sizes.push_back(b);
  if (ping_sizes.back() != (std::size_t{4} << 20)) ping_sizes.push_back(std::size_t{4} << 20);
  LinkFit intra, inter;
  if (layout.intra_peer > 0) intra = measure_link(*transport, comm, 0, layout.intra_peer, ping_sizes, reps);
  if (layout.inter_peer > 0) inter = measure_link(*transport, comm, 0, layout.inter_peer, ping_sizes, reps);
  if (layout.intra_peer < 0) intra = inter;  // one rank per node: every link crosses nodes
  if (layout.inter_peer < 0) inter = intra;  // one node
  const LocalCosts costs = measure_local_costs(comm, layout.node.get(), a.quick);

  Tuning t = base;
  t.model.alpha_intra_s = intra.alpha_s;
  t.model.beta_intra_s_per_byte = intra.beta_s_per_byte;
  t.model.alpha_inter_s = inter.alpha_s;
  t.model.beta_inter_s_per_byte = inter.beta_s_per_byte;
  t.model.gamma_s_per_byte = costs.gamma_s_per_byte;
  t.model.shm_beta_s_per_byte = costs.shm_beta_s_per_byte;
  // One rank per node has nothing to synchronise: keep the base value rather than write a 0.
  t.model.shm_sync_s = layout.node_size > 1 ? costs.node_barrier_s : base.model.shm_sync_s;
  calibrate(t, base.ranks_per_node, comm, size, layout.node_size, a.quick);

  if (rank == 0) {
    const bool virtual_nodes = base.ranks_per_node > 0;
    t.save(a.output, measurement_metadata(a, layout, size, virtual_nodes, transport->name(), intra, inter, costs).dump());
    t.tuning_file = a.output;
    print_tuning(t, a, layout, size, virtual_nodes, transport->name(), intra, inter);
    if (a.predict_ranks_per_node > 0) print_prediction(t, a.predict_ranks_per_node, a.predict_nodes_max, sizes);
    std::fflush(stdout);
  }
  HPCTRAIN_CHECK_MPI(MPI_Barrier(comm));
  return 0;
}

}  // namespace hpctrain::cli
