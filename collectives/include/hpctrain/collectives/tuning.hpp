#pragma once
/// @file
/// Every tuning knob of the collectives layer and its environment override, in one place.
///
/// | knob                    | environment variable               | default    |
/// |-------------------------|------------------------------------|------------|
/// | allreduce algorithm     | HPCTRAIN_ALLREDUCE_ALGO            | auto       |
/// | collective timeout      | HPCTRAIN_COLL_TIMEOUT_S            | 300        |
/// | ring segment size       | HPCTRAIN_RING_SEGMENT_BYTES        | 1 MiB      |
/// | ring receive window     | HPCTRAIN_RING_WINDOW               | 4          |
/// | tree segment size       | HPCTRAIN_TREE_SEGMENT_BYTES        | 256 KiB    |
/// | Rabenseifner segment    | HPCTRAIN_RABENSEIFNER_SEGMENT_BYTES| 1 MiB      |
/// | tuning file (JSON)      | HPCTRAIN_TUNING_FILE               | none       |
/// | auto: candidates        | HPCTRAIN_AUTO_ALGOS (comma list)   | all modelled |
/// | binomial below (bytes)  | HPCTRAIN_TREE_BINOMIAL_MAX_BYTES   | 64 KiB     |
/// | polls before yielding   | HPCTRAIN_SPIN_POLLS                | 64         |
/// | ranks per (virtual) node| HPCTRAIN_RANKS_PER_NODE            | 0 (detect) |
/// | shm staging segment     | HPCTRAIN_SHM_SEGMENT_BYTES         | 1 MiB      |
/// | shm one-step path up to | HPCTRAIN_SHM_SMALL_MAX_BYTES       | 8 KiB      |
/// | device staging chunk    | HPCTRAIN_DEVICE_CHUNK_BYTES        | 4 MiB      |
/// | transport               | HPCTRAIN_TRANSPORT (mpi, ucx)      | mpi        |
/// | UCX: register from      | HPCTRAIN_UCX_REG_MIN_BYTES         | 0 (off)    |
/// | UCX: registrations kept | HPCTRAIN_UCX_REG_MAX_ENTRIES       | 256        |
/// | UCX: close timeout      | HPCTRAIN_UCX_CLOSE_TIMEOUT_S       | 5          |
/// | UCX: peer failure errors| HPCTRAIN_UCX_PEER_ERRORS (0, 1)    | 0          |
/// | UCX: idle progress (us) | HPCTRAIN_UCX_IDLE_PROGRESS_US      | 1000       |
///
/// Precedence: the defaults below, then the JSON file named by HPCTRAIN_TUNING_FILE (written by
/// `hpctrain tune-collectives`, schema in README.md, "Collectives tuning"), then the environment variables.
///
/// ## The cost model behind Algorithm::automatic
///
/// `automatic` takes the algorithm with the smallest predicted time (CostModel, after Thakur,
/// Rabenseifner and Gropp, "Optimization of Collective Communication Operations in MPICH",
/// IJHPCA 19(1), 2005, and NCCL's tuning model `time = latency * steps + bytes / bandwidth`,
/// src/graph/tuning.cc). For n bytes over p ranks, k ranks per node and N = ceil(p/k) nodes:
/// α is the time per message, β per byte moved, γ per byte reduced; a flat algorithm over more
/// than one node is paced by its slowest link, so it uses the inter-node α/β, on one node the
/// intra-node ones. With CostModel::nodes_per_switch set (a fabric of leaf switches of g =
/// k·nodes_per_switch consecutive ranks), a message between ranks r, r' of different switches
/// costs α_far = alpha_far_s (alpha_inter_s when that is 0) instead: recursive doubling / Rabenseifner (and the
/// reduce-scatter's halving) pay it on each exchange at distance 2^j >= g, the binomial tree on
/// its levels that far, the ring and the pipelined tree on every step once p > g (a pipeline
/// runs at its slowest link); the fold's pairs are neighbours. The bytes of those far exchanges
/// of recursive doubling and the halving / doubling (every rank of a switch at once) move at
/// far_beta_scale·β; the ring's and the trees' far messages are few per switch and keep β. In
/// the formulas below "lg p·α" stands for that sum over the steps, and the bytes of each step
/// are priced at its own β: recursive doubling moves n at every distance; Rabenseifner's
/// all-reduce n/2d at distance d (the largest pieces to the nearest rank); the reduce-scatter's
/// halving n·d/p' (the largest pieces to the farthest). lg is log2; p' = 2^floor(lg p);
/// "fold" = the non-power-of-two extra steps (the p - p' extra ranks hand their vector to a
/// partner before and get the result after):
/// 2(α + nβ) + nγ when p != p', else 0. Every algorithm also pays its constant overhead_s.
///
/// - ring (Patarasuk–Yuan; reduce-scatter + all-gather, each chunk n/p cut into m =
///   ceil(n/(p·ring_segment_bytes)) segments): 2(p-1)·m·α + 2(p-1)/p·nβ + (p-1)/p·nγ.
/// - tree, n <= tree_binomial_max_bytes (binomial reduce + broadcast, the reduce's last step and
///   the broadcast's first fused into one exchange): (2⌈lg p⌉ - 1)(α + nβ) + ⌈lg p⌉·nγ; with
///   n < eager_bytes the broadcast's sends of a rank leave together and share its link, so its
///   D = ⌈lg p⌉ - 1 levels move D(D+1)/2·nβ instead of D·nβ.
///   tree, larger (double binary tree, Sanders–Speck–Träff; each half of the vector pipelined
///   up and back down its own tree of depth d = floor(lg p) in segments s = min(tree_segment_bytes,
///   n/2), m = ceil(n/2s): S = 2d + m - 1 pipeline steps; per step the busiest rank moves a
///   segment over each of its L tree links, L = 4 at p = 2^k - 1, 5 for most other p (one rank
///   is interior in both trees), but at most 2m of them before the pipeline fills):
///   S(α + min(2m, L)·sβ + 2sγ)  (→ L/2·nβ + nγ for long vectors). Against SimGrid SMPI at
///   16–256 ranks, 256 KiB to 64 MiB: within 0.80–1.15 (docs/simulation.md).
/// - recursive_doubling: floor(lg p)(α + nβ + nγ) + fold.
/// - rabenseifner (recursive-halving reduce-scatter + recursive-doubling all-gather):
///   2 floor(lg p)·α + 2(p'-1)/p'·nβ + (p'-1)/p'·nγ + fold.
/// - shm (one node only, k >= p; β_shm = 1 / concurrent copy bandwidth, σ = shm_sync_s):
///   min(large, small) with large = 2σ + 2nβ_shm + (p-1)/p·nγ (copy-in, reduce the own 1/p
///   slice reading every peer, copy-out) and small = σ + nβ_shm + (p-1)·nγ (copy-in, one
///   flag, every rank reduces all inputs itself).
/// - hierarchical (N >= 2 and k > 1): 2σ + 2nβ_shm + (k-1)/k·nγ (shared-memory reduce-scatter
///   and all-gather on each node) + the best flat algorithm above for n/k bytes over N ranks
///   with the inter-node α and k·β_inter (the node's k slices cross its link at the same time).
/// - mpi is not modelled: automatic never picks it (ask for it explicitly).
///
/// Ties go to the earlier of ring, tree, recursive_doubling, rabenseifner, shm, hierarchical.
///
/// Reduce-scatter and all-gather (n = the whole vector, p blocks; the same links, calibration of
/// the same-named all-reduce and overhead_s; candidates ring, rabenseifner, shm and
/// hierarchical of auto_algorithms, ties to the earlier; HPCTRAIN_ALLREDUCE_ALGO does not apply
/// to them):
/// - ring reduce-scatter: (p-1)·m·α + (p-1)/p·nβ + (p-1)/p·nγ; all-gather (p-1)·m·α + (p-1)/p·nβ.
/// - rabenseifner (recursive halving / recursive doubling over the blocks): reduce-scatter
///   floor(lg p)·α + (p'-1)/p'·nβ + (p'-1)/p'·nγ + fold_rs, all-gather floor(lg p)·α +
///   (p'-1)/p'·nβ + fold_ag, with fold_rs = 2α + (n + n/p)β + nγ (the whole vector in, the
///   partner's block out) and fold_ag = 2α + (n/p + n)β when p != p', else 0.
/// - shm (one node only, segment s = shm_segment_bytes): reduce-scatter ⌈n/s⌉·σ + nβ_shm +
///   (p-1)/p·nγ (the whole input staged, the own block reduced from p copies); all-gather
///   ⌈n/(p·s)⌉·σ + nβ_shm (the own block staged, the others copied out).
/// - hierarchical (N >= 2 nodes of k > 1 ranks each, p = N·k; else +infinity): the shm formula
///   above for n bytes over k ranks, then the better of the ring and the halving / doubling
///   formulas for the part, n/k bytes, over N ranks with β_inter·k (the k ranks of a node share
///   its link); the all-gather adds n/k·β_shm (its part copied into place). The two steps run
///   one after the other.
/// HPCTRAIN_ALLREDUCE_ALGO (or a non-automatic `allreduce_algorithm`) bypasses the model;
/// HPCTRAIN_AUTO_ALGOS restricts the candidates.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "hpctrain/collectives/types.hpp"

namespace hpctrain::coll {

/// Point-to-point layer under a communicator (make_transport, make_default_transport).
enum class TransportKind { mpi, ucx };
/// "mpi", "ucx".
const char* to_string(TransportKind k) noexcept;
/// Parses a byte count with an optional K/M/G (KiB/MiB/GiB) suffix ("64K", "1MiB", "4096");
/// throws hpctrain::Error naming `what` (the flag or variable) otherwise.
std::size_t parse_byte_count(const std::string& text, const std::string& what);
/// Parses "mpi" or "ucx"; throws hpctrain::Error naming `where` otherwise.
TransportKind parse_transport_kind(const std::string& name, const char* where = "transport");

/// Number of Algorithm values (automatic included), for per-algorithm tables.
inline constexpr std::size_t kAlgorithmCount = 9;

/// Parameters of the all-reduce cost model (see the file comment for the formulas). The
/// defaults are order-of-magnitude figures for a current CPU node with a 100 Gb/s class
/// network (1-2 µs MPI latency, about 10 GB/s per rank between nodes), used until `hpctrain
/// tune-collectives` has measured the machine. Within a node a point-to-point message that
/// streams from memory moves at about a third of a memcpy's rate (measured on the development
/// VM: ~2.8 GB/s for the ring's 64 MiB steps against ~10 GB/s in-cache ping-pong and a ~6 GB/s
/// memcpy), so the default intra-node β is 3e-10 s/B: with 1e-10 the uncalibrated model ranked
/// the shared-memory algorithm 1.3-2.4x too slow against the point-to-point ones.
struct CostModel {
  /// Intra-node: seconds per message (the α of a point-to-point message within a node).
  double alpha_intra_s = 2e-6;
  /// Intra-node: seconds per byte moved point-to-point (1 / bandwidth).
  double beta_intra_s_per_byte = 3e-10;
  /// Inter-node: seconds per message.
  double alpha_inter_s = 2e-6;
  /// Inter-node: seconds per byte moved.
  double beta_inter_s_per_byte = 1e-10;
  /// Across leaf switches: seconds per message between ranks whose nodes hang off different
  /// switches (the fabric's far tier: a fat-tree's spine hops). 0 (the default): one tier,
  /// alpha_inter_s also between switches. Used only with nodes_per_switch.
  double alpha_far_s = 0.0;
  /// Nodes under one leaf switch, in rank order (ranks r and r' share a switch when
  /// r / (k·nodes_per_switch) = r' / (k·nodes_per_switch), k ranks per node). 0 (the default):
  /// unknown, every node under one switch. `hpctrain tune-collectives` does not measure it; set
  /// it, with alpha_far_s, in the tuning file from the fabric's layout (scripts/simulate-collectives
  /// does, from the simulated platform).
  std::size_t nodes_per_switch = 0;
  /// β of a message between switch groups as a multiple of the β used inside one: in an
  /// exchange every rank of one switch does with a rank of another (recursive doubling's and
  /// the halving's far steps) they share the links between the two switches. 1 (the default):
  /// full bisection (a fat-tree's leaf has as many uplinks as hosts); a dragonfly router with 4
  /// hosts and one link to each other router: 4. Used only with nodes_per_switch.
  double far_beta_scale = 1.0;
  /// Messages shorter than this go out eagerly: a send completes at once, so sends a rank posts
  /// one after another still share its link on the wire. The binomial tree's broadcast (a rank
  /// sends to its ⌈lg⌉ children in turn) pays for it. 65536 is Open MPI's TCP eager limit and
  /// SimGrid SMPI's (smpi/send-is-detached-thresh); 0: every message waits for its receiver.
  std::size_t eager_bytes = 65536;
  /// Seconds per byte reduced (one reduce_into of float32 sums, all ranks reducing at once).
  double gamma_s_per_byte = 2e-10;
  /// Shared memory: seconds per byte copied with every rank of the node copying at once.
  double shm_beta_s_per_byte = 1.25e-10;
  /// Shared memory: one synchronisation of the node's ranks (a flag round / node barrier).
  double shm_sync_s = 1e-6;
  /// Constant cost per call of each algorithm, indexed by the Algorithm value (0 by default).
  std::array<double, kAlgorithmCount> overhead_s{};
  /// Measured calibration (`hpctrain tune-collectives` fills it): the byte terms (β and γ) of
  /// algorithm a at n bytes are multiplied by calibration_scale[a], interpolated linearly in
  /// lg n between the sizes calibration_bytes and held constant beyond its ends. The formulas
  /// assume one bandwidth per resource; real nodes move a message that fits in cache several
  /// times faster than one that streams from memory, and each algorithm touches memory
  /// differently, so the scale is fitted per algorithm at a few sizes. Empty (the default) or
  /// an algorithm without a list: scale 1, the formulas as written.
  std::vector<double> calibration_bytes;
  std::array<std::vector<double>, kAlgorithmCount> calibration_scale{};
  /// calibration_scale[algo] at `bytes` (1 without calibration).
  double calibration(Algorithm algo, double bytes) const noexcept;
};

struct Tuning {
  /// Bits of auto_algorithms for ring, tree, recursive_doubling, rabenseifner, shm, hierarchical.
  static constexpr std::uint32_t kAllModelled = 0xFEu & ~(1u << 3);  // bits 1-7 but mpi (3); nccl (8) is not one

  /// Algorithm used when a call passes Algorithm::automatic. `automatic` here means: choose
  /// by the cost model (choose_allreduce).
  Algorithm allreduce_algorithm = Algorithm::automatic;
  /// A collective that has not completed after this many seconds fails with a TimeoutError
  /// naming the peers it waited for. 0 disables the timeout. In a SimGrid SMPI build
  /// (HPCTRAIN_SMPI) the default is 0: one OS thread runs every simulated rank, so a real-time
  /// deadline measures the whole simulation's progress, not a peer's (a 256-rank run tripped
  /// the 300 s watchdog while all ranks were healthy); SimGrid reports a deadlock itself.
#ifdef HPCTRAIN_SMPI
  double timeout_s = 0.0;
#else
  double timeout_s = 300.0;
#endif
  /// Ring: messages are cut into segments of this size so reduction overlaps communication.
  std::size_t ring_segment_bytes = std::size_t{1} << 20;
  /// Ring: how many segment receives are posted ahead (bounds the scratch memory).
  std::size_t ring_window = 4;
  /// Tree: pipeline segment of the double binary tree.
  std::size_t tree_segment_bytes = std::size_t{256} << 10;
  /// Tree: messages up to this size use the binomial reduce + broadcast (latency-bound);
  /// larger ones the pipelined double binary tree.
  std::size_t tree_binomial_max_bytes = std::size_t{64} << 10;
  /// Rabenseifner: each recursive-halving exchange (and the fold of a non-power-of-two rank
  /// count) moves in segments of this size, so the reduction of one segment overlaps the
  /// transfer of the next and the scratch memory stays a few segments.
  std::size_t rabenseifner_segment_bytes = std::size_t{1} << 20;
  /// automatic: the cost model's parameters (HPCTRAIN_TUNING_FILE, else the defaults).
  CostModel model;
  /// automatic: the algorithms it may pick, one bit per Algorithm value (bit 1 << int(a)).
  /// Default: every modelled algorithm (all but automatic, mpi and nccl); in a SimGrid SMPI build
  /// (HPCTRAIN_SMPI) all but shm and hierarchical, which cannot run there (docs/simulation.md).
#ifdef HPCTRAIN_SMPI
  std::uint32_t auto_algorithms = kAllModelled & ~((1u << 6) | (1u << 7));  // not shm (6), hierarchical (7)
#else
  std::uint32_t auto_algorithms = kAllModelled;
#endif
  /// The tuning file the values came from ("" for none), for reports.
  std::string tuning_file;
  /// Waits poll this many times without progress before they start yielding the core
  /// (sched_yield) between polls. Low suits oversubscribed ranks (the peer needs the core);
  /// with one rank per dedicated core a large value avoids losing the core to other processes
  /// in the middle of a collective (MPI does not yield unless it is oversubscribed).
  std::size_t spin_polls = 64;
  /// Ranks per node for the hierarchical and shared-memory algorithms. 0: detect the real
  /// nodes (MPI_COMM_TYPE_SHARED). k > 0: consecutive blocks of k ranks form virtual nodes, so
  /// the multi-node paths can be exercised and benchmarked on one machine.
  int ranks_per_node = 0;
  /// shm and hierarchical: each rank stages its input through a shared-memory buffer of this
  /// many bytes (two of them, alternating), so large messages go through in pipelined
  /// segments, the window stays small, and a segment's copy-in, reduction and copy-out stay in
  /// cache. Each segment costs two flag waits, which on a loaded machine (a peer descheduled)
  /// cost far more than the copies: 1 MiB measured faster than 256 KiB there.
  std::size_t shm_segment_bytes = std::size_t{1} << 20;
  /// shm: messages up to this size take the one-step path (every rank publishes its input,
  /// one barrier, every rank reduces all inputs itself); larger ones reduce-scatter + gather.
  std::size_t shm_small_max_bytes = std::size_t{8} << 10;

  /// Device buffers (MemorySpace::device) not handed to the transport are staged through two
  /// host buffers of this many bytes: chunk k+1's copy to the host and chunk k-1's copy back
  /// overlap chunk k's host all-reduce. Environment minimum 256 bytes.
  std::size_t device_chunk_bytes = std::size_t{4} << 20;

  /// Transport make_default_transport() builds.
  TransportKind transport = TransportKind::mpi;
  /// UCX: sends/receives of at least this many bytes use a memory handle from a per-transport
  /// cache of ucp_mem_map registrations keyed by (address, length), so a training loop that
  /// re-uses its gradient buffers registers each segment once. 0 (default) turns the cache off
  /// and leaves registration to UCX's own registration cache, which (unlike ours) is told when
  /// memory is freed: with ours, a buffer freed and re-allocated at the same address would keep
  /// a stale registration, which on RDMA hardware means stale data. See docs/ucx.md.
  std::size_t ucx_reg_min_bytes = 0;
  /// UCX: at most this many cached registrations per transport (beyond: unregistered sends).
  std::size_t ucx_reg_max_entries = 256;
  /// UCX: teardown waits this long for endpoints to flush and close, then closes them by force
  /// (a peer that has already gone must not hang teardown).
  double ucx_close_timeout_s = 5.0;
  /// UCX: endpoints in UCP_ERR_HANDLING_MODE_PEER, so a peer that dies fails operations with
  /// UCX's status at once (instead of our timeout naming the peer). Off by default: UCX 1.13's
  /// shared-memory transports have no peer failure handler, so with it on, ranks on one node
  /// need tcp (or an RDMA transport) to reach each other.
  bool ucx_peer_errors = false;
  /// UCX: a helper thread looks at the worker this often (microseconds) and progresses it when
  /// the owner has not used it since the last look, so protocol messages UCX still owes a peer
  /// after our requests completed (rendezvous acknowledgements) leave within two intervals even
  /// when this rank has gone on to other work. While a collective runs the helper stays out (the
  /// owner progresses the worker itself). 0 disables it, which can hang a peer (see
  /// ucx_transport.cpp and docs/ucx.md).
  std::size_t ucx_idle_progress_us = 1000;

  /// Defaults, then the file named by HPCTRAIN_TUNING_FILE (if set), then the HPCTRAIN_*
  /// environment variables above. A malformed value throws hpctrain::Error naming the
  /// variable; a missing or malformed file, or an unknown key in it, names the file and key.
  static Tuning from_environment();

  /// `base` with the values of the JSON tuning file at `path` applied (keys it lacks keep
  /// base's values). Throws hpctrain::Error naming the file and the key on any problem.
  static Tuning from_file(const std::string& path, const Tuning& base);
  /// from_file(path, Tuning{}): the defaults with the file's values.
  static Tuning from_file(const std::string& path);
  /// The tuning file text (schema_version 1): the cost model, the algorithm knobs, and
  /// `measured` (free-form provenance: an object copied into the file as given, JSON text).
  std::string to_json(const std::string& measured_json = "{}") const;
  /// Writes to_json(measured_json) to `path` (through a temporary file and a rename).
  void save(const std::string& path, const std::string& measured_json = "{}") const;

  /// The cost model's time in seconds for `algo` on `bytes` over `ranks` ranks with
  /// `ranks_per_node` on each node; +infinity when `algo` is not modelled (automatic, mpi) or
  /// cannot run on that layout (shm over several nodes, hierarchical on one node or with one
  /// rank per node). ranks_per_node <= 0 or > ranks means one node.
  double predict_allreduce_s(Algorithm algo, std::size_t bytes, int ranks, int ranks_per_node) const noexcept;
  /// The formula alone for `n` bytes, every β and γ multiplied by `byte_scale` (the
  /// calibration), without overhead_s; +infinity as above.
  double formula_s(Algorithm algo, double n, int ranks, int ranks_per_node, double byte_scale = 1.0) const noexcept;

  /// The algorithm `automatic` resolves to for a message of `bytes` over `ranks` ranks, of
  /// which `ranks_per_node` share each node (ranks_per_node == ranks: one node): a non-automatic
  /// allreduce_algorithm, else the candidate of auto_algorithms with the smallest
  /// predict_allreduce_s (ring when no candidate can run on the layout).
  Algorithm choose_allreduce(std::size_t bytes, int ranks, int ranks_per_node) const noexcept;
  /// The cost model's time for a reduce-scatter / all-gather of a `bytes`-byte vector (all p
  /// blocks) by ring, rabenseifner (halving / doubling), shm (one node; +infinity over several)
  /// or hierarchical (nodes of equal size, at least two; +infinity otherwise); +infinity for any
  /// other algorithm.
  double predict_reduce_scatter_s(Algorithm algo, std::size_t bytes, int ranks, int ranks_per_node) const noexcept;
  double predict_allgather_s(Algorithm algo, std::size_t bytes, int ranks, int ranks_per_node) const noexcept;
  /// What Algorithm::automatic runs for reduce-scatter / all-gather: the cheapest of ring,
  /// rabenseifner, shm and hierarchical among auto_algorithms (ring when none is a candidate;
  /// ties to the earlier).
  Algorithm choose_reduce_scatter(std::size_t bytes, int ranks, int ranks_per_node) const noexcept;
  Algorithm choose_allgather(std::size_t bytes, int ranks, int ranks_per_node) const noexcept;
  /// The algorithm among `candidates` (auto_algorithms bits) with the smallest
  /// predict_allreduce_s; ring when none can run on the layout.
  Algorithm cheapest_allreduce(std::size_t bytes, int ranks, int ranks_per_node,
                               std::uint32_t candidates) const noexcept;
};

/// Parses a comma-separated list of modelled algorithm names into auto_algorithms bits; throws
/// hpctrain::Error naming `where` for an unknown name, `auto`, `mpi` or an empty list.
std::uint32_t parse_auto_algorithms(const std::string& list, const std::string& where);

}  // namespace hpctrain::coll
