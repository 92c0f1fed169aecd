// The α-β-γ cost model `auto` picks by: one formula per algorithm (tuning.hpp's file comment
// gives them; the functions below follow it term by term), the measured calibration of the
// byte terms, and the choice of the cheapest candidate.

#include <algorithm>
#include <cmath>
#include <limits>

#include "hpctrain/collectives/tuning.hpp"
#include "modelled_algorithms.hpp"

namespace hpctrain::coll {

namespace {

int ceil_lg(int p) {
  int l = 0;
  while ((1 << l) < p) ++l;
  return l;
}
int floor_lg(int p) {
  int l = 0;
  while ((2 << l) <= p) ++l;
  return l;
}

struct Link {
  double alpha, beta;
};

/// The links a flat algorithm's messages take: `near` inside a switch group of `group`
/// consecutive ranks, `far_alpha` per message between groups, and `far_beta` for the bytes of
/// an exchange all ranks do across groups at once. group >= p: one tier.
struct Fabric {
  Link near;
  double far_alpha;
  int group;
  /// β of the far steps of an exchange every rank does at once (their flows share the links
  /// between two switches).
  double far_beta;
  /// α of a message between ranks `distance` apart (power-of-two distances, groups aligned).
  double alpha_at(int distance) const { return distance >= group ? far_alpha : near.alpha; }
  /// β of an all-ranks exchange step at `distance`.
  double beta_at(int distance) const { return distance >= group ? far_beta : near.beta; }
  /// Σ α over the exchanges at distances 1, 2, 4, .., 2^(lg - 1).
  double doubling_alpha(int lg) const {
    double a = 0.0;
    for (int j = 0; j < lg; ++j) a += alpha_at(1 << j);
    return a;
  }
  /// Σ bytes·β over the same exchanges, moving bytes(d) at distance d.
  template <class Bytes>
  double doubling_bytes(int lg, Bytes bytes) const {
    double t = 0.0;
    for (int j = 0; j < lg; ++j) t += bytes(static_cast<double>(1 << j)) * beta_at(1 << j);
    return t;
  }
  /// α of a step of a pipeline that every link carries (the ring, the double binary tree): the
  /// slowest link paces it, the far one once the ranks span groups. (Measured under SMPI, 64
  /// ranks under 2 leaves, 2 µs / 4 µs: a ring step of 512 B took 3.1 µs, of 256 KiB 21 µs of
  /// bandwidth + 9.7 µs; the mean of the ring's links, 2.1 µs, under-predicts both.)
  double slowest_alpha(int p) const { return group >= p ? near.alpha : far_alpha; }
};

/// The non-power-of-two fold: ranks 2i and 2i+1 (i < p - p') pair up, so its two messages are
/// between neighbours.
double fold_s(double n, int p, const Fabric& f, double gamma) {
  return p == (1 << floor_lg(p)) ? 0.0 : 2.0 * (f.alpha_at(1) + n * f.near.beta) + n * gamma;
}

double ring_s(double n, int p, const Fabric& f, double gamma, double segment) {
  if (p <= 1) return 0.0;
  const double chunk = n / p;
  const double segments = std::max(1.0, std::ceil(chunk / segment));
  return 2.0 * (p - 1) * segments * f.slowest_alpha(p) + 2.0 * (p - 1) * chunk * f.near.beta + (p - 1) * chunk * gamma;
}

double tree_s(double n, int p, const Fabric& f, double gamma, double segment, double binomial_max, double eager) {
  if (p <= 1) return 0.0;
  if (n <= binomial_max) {
    // Binomial: the reduce inside [0, top) and [top, p) (distances 1 .. top/2), one exchange
    // 0 <-> top, the broadcast back down (tree_allreduce.cpp): 2⌈lg p⌉ - 1 steps. An eager
    // broadcast's sends share the sender's link: its level i (of D) carries D - i + 1 messages.
    const int depth = ceil_lg(p);
    const int top = 1 << (depth - 1);
    const double levels = depth - 1;
    const double bcast_messages = n < eager ? levels * (levels + 1) / 2 : levels;
    return 2.0 * f.doubling_alpha(depth - 1) + f.alpha_at(top) + (levels + 1 + bcast_messages) * n * f.near.beta +
           depth * n * gamma;
  }
  // Double binary tree: each half climbs its tree (depth d = ⌊lg p⌋) and descends it again in
  // m segments, S = 2d + m - 1 pipeline steps. Per step the busiest rank moves a segment over
  // each of its L tree links once the pipeline is full (L = double_tree_busiest_links), and
  // at most 2m (two children's parts per segment) before that.
  const double s = std::min(segment, n / 2);
  const double m = std::ceil(n / (2 * s));
  const double steps = 2.0 * floor_lg(p) + m - 1;
  thread_local int memo_p = 0, memo_links = 0;  // O(p lg p) to count; `auto` asks per call
  if (memo_p != p) memo_links = detail::double_tree_busiest_links(memo_p = p);
  const double links = std::min(2.0 * m, static_cast<double>(memo_links));
  return steps * (f.slowest_alpha(p) + links * s * f.near.beta + 2.0 * s * gamma);
}

double recursive_doubling_s(double n, int p, const Fabric& f, double gamma) {
  if (p <= 1) return 0.0;
  const int lg = floor_lg(p);
  return f.doubling_alpha(lg) + f.doubling_bytes(lg, [n](double) { return n; }) + lg * n * gamma +
         fold_s(n, p, f, gamma);
}

double rabenseifner_s(double n, int p, const Fabric& f, double gamma) {
  if (p <= 1) return 0.0;
  const int lg = floor_lg(p);
  const double q = static_cast<double>(1 << lg);
  // Halving then doubling: n/2d at distance d, the largest pieces to the nearest rank
  // (rabenseifner_allreduce.cpp); Σ n/2d = (q-1)/q·n.
  return 2.0 * f.doubling_alpha(lg) + 2.0 * f.doubling_bytes(lg, [n](double d) { return n / (2 * d); }) +
         (q - 1) / q * n * gamma + fold_s(n, p, f, gamma);
}

// Reduce-scatter / all-gather of the whole n-byte vector (tuning.hpp gives the formulas).
double ring_half_s(double n, int p, const Fabric& f, double gamma, double segment, bool reduce) {
  if (p <= 1) return 0.0;
  const double chunk = n / p;
  const double segments = std::max(1.0, std::ceil(chunk / segment));
  return (p - 1) * segments * f.slowest_alpha(p) + (p - 1) * chunk * f.near.beta +
         (reduce ? (p - 1) * chunk * gamma : 0.0);
}

double halving_doubling_s(double n, int p, const Fabric& f, double gamma, bool reduce) {
  if (p <= 1) return 0.0;
  const int lg = floor_lg(p);
  const double q = static_cast<double>(1 << lg);
  // n·d/q at distance d: the largest pieces to the farthest rank (recursive_halving.cpp).
  double t = f.doubling_alpha(lg) + f.doubling_bytes(lg, [n, q](double d) { return n * d / q; }) +
             (reduce ? (q - 1) / q * n * gamma : 0.0);
  if (p != (1 << lg)) t += 2.0 * f.alpha_at(1) + (n + n / p) * f.near.beta + (reduce ? n * gamma : 0.0);
  return t;
}

// shm on one node of k ranks: the better of the sliced (large) and the all-inputs (small) schedule.
double shm_s(double n, int k, double sync, double shm_beta, double gamma) {
  if (k <= 1) return 0.0;
  const double large = 2.0 * sync + 2.0 * n * shm_beta + (k - 1.0) / k * n * gamma;
  const double small = sync + n * shm_beta + (k - 1.0) * n * gamma;
  return std::min(large, small);
}

// shm reduce-scatter / all-gather of the whole n-byte vector on one node of k ranks, staging
// segment s (shm_scatter_gather.cpp): one flag wait per step; the reduce-scatter stages the
// whole input (n bytes in, a piece of every block per step, so ⌈n/s⌉ steps) and reduces its
// block from k copies; the all-gather stages its block (⌈n/(k·s)⌉ steps) and copies k-1 out.
double shm_half_s(double n, int k, double sync, double shm_beta, double gamma, double segment, bool reduce) {
  if (k <= 1) return 0.0;
  if (reduce) return std::max(1.0, std::ceil(n / segment)) * sync + n * shm_beta + (k - 1.0) / k * n * gamma;
  return std::max(1.0, std::ceil(n / (k * segment))) * sync + n * shm_beta;
}

/// The fabric of a flat algorithm over links `link`, switch groups of `ranks_per_switch`
/// consecutive ranks (0: no far tier). alpha_far_s 0 keeps the link's α between switches.
Fabric fabric_of(const CostModel& m, Link link, std::size_t ranks_per_switch) {
  if (ranks_per_switch == 0) return Fabric{link, link.alpha, std::numeric_limits<int>::max(), link.beta};
  const int group = static_cast<int>(std::min<std::size_t>(ranks_per_switch, std::numeric_limits<int>::max()));
  return Fabric{link, m.alpha_far_s > 0.0 ? m.alpha_far_s : link.alpha, group, link.beta * m.far_beta_scale};
}

}  // namespace

double CostModel::calibration(Algorithm algo, double bytes) const noexcept {
  const auto& scale = calibration_scale[static_cast<std::size_t>(algo)];
  if (scale.empty() || scale.size() != calibration_bytes.size()) return 1.0;
  if (bytes <= calibration_bytes.front()) return scale.front();
  if (bytes >= calibration_bytes.back()) return scale.back();
  std::size_t i = 1;
  while (calibration_bytes[i] < bytes) ++i;
  const double f = std::log2(bytes / calibration_bytes[i - 1]) / std::log2(calibration_bytes[i] / calibration_bytes[i - 1]);
  return scale[i - 1] + f * (scale[i] - scale[i - 1]);
}

double Tuning::predict_allreduce_s(Algorithm algo, std::size_t bytes, int ranks, int ranks_per_node) const noexcept {
  constexpr double kNever = std::numeric_limits<double>::infinity();
  if (!detail::is_modelled(algo) || ranks < 1) return kNever;
  const double n = static_cast<double>(bytes);
  // The terms in α and synchronisations stay; every β and γ is scaled by the calibration.
  return formula_s(algo, n, ranks, ranks_per_node, model.calibration(algo, n)) +
         model.overhead_s[static_cast<std::size_t>(algo)];
}

double Tuning::formula_s(Algorithm algo, double n, int ranks, int ranks_per_node, double byte_scale) const noexcept {
  constexpr double kNever = std::numeric_limits<double>::infinity();
  if (!detail::is_modelled(algo) || ranks < 1) return kNever;
  const int k = (ranks_per_node <= 0 || ranks_per_node > ranks) ? ranks : ranks_per_node;
  const int nodes = (ranks + k - 1) / k;
  const double gamma = model.gamma_s_per_byte * byte_scale;
  const double shm_beta = model.shm_beta_s_per_byte * byte_scale;
  const double beta_inter = model.beta_inter_s_per_byte * byte_scale;
  const Fabric flat = fabric_of(model,
                                nodes > 1 ? Link{model.alpha_inter_s, beta_inter}
                                          : Link{model.alpha_intra_s, model.beta_intra_s_per_byte * byte_scale},
                                static_cast<std::size_t>(k) * model.nodes_per_switch);
  const double ring_seg = static_cast<double>(ring_segment_bytes);
  const double tree_seg = static_cast<double>(tree_segment_bytes);
  const double binomial_max = static_cast<double>(tree_binomial_max_bytes);
  const double eager = static_cast<double>(model.eager_bytes);
  double t = kNever;
  switch (algo) {
    case Algorithm::ring: t = ring_s(n, ranks, flat, gamma, ring_seg); break;
    case Algorithm::tree: t = tree_s(n, ranks, flat, gamma, tree_seg, binomial_max, eager); break;
    case Algorithm::recursive_doubling: t = recursive_doubling_s(n, ranks, flat, gamma); break;
    case Algorithm::rabenseifner: t = rabenseifner_s(n, ranks, flat, gamma); break;
    case Algorithm::shm:
      if (nodes == 1) t = shm_s(n, ranks, model.shm_sync_s, shm_beta, gamma);
      break;
    case Algorithm::hierarchical:
      if (nodes >= 2 && k > 1) {
        const double slice = n / k;
        const Fabric inter = fabric_of(model, Link{model.alpha_inter_s, beta_inter * k}, model.nodes_per_switch);
        const double across = std::min({ring_s(slice, nodes, inter, gamma, ring_seg),
                                        tree_s(slice, nodes, inter, gamma, tree_seg, binomial_max, eager),
                                        recursive_doubling_s(slice, nodes, inter, gamma),
                                        rabenseifner_s(slice, nodes, inter, gamma)});
        t = 2.0 * model.shm_sync_s + 2.0 * n * shm_beta + (k - 1.0) / k * n * gamma + across;
      }
      break;
    case Algorithm::automatic:
    case Algorithm::mpi:
    case Algorithm::nccl: break;
  }
  return t;
}

namespace {

double scatter_gather_s(const Tuning& tuning, Algorithm algo, std::size_t bytes, int ranks, int ranks_per_node,
                        bool reduce) noexcept {
  constexpr double kNever = std::numeric_limits<double>::infinity();
  if ((algo != Algorithm::ring && algo != Algorithm::rabenseifner && algo != Algorithm::shm &&
       algo != Algorithm::hierarchical) ||
      ranks < 1)
    return kNever;
  const CostModel& model = tuning.model;
  const double n = static_cast<double>(bytes);
  const double scale = model.calibration(algo, n);
  const int k = (ranks_per_node <= 0 || ranks_per_node > ranks) ? ranks : ranks_per_node;
  const int nodes = (ranks + k - 1) / k;
  const bool several_nodes = nodes > 1;
  const double overhead = model.overhead_s[static_cast<std::size_t>(algo)];
  const double gamma = model.gamma_s_per_byte * scale;
  const double shm_beta = model.shm_beta_s_per_byte * scale;
  const double shm_seg = static_cast<double>(tuning.shm_segment_bytes);
  if (algo == Algorithm::shm) {
    if (several_nodes) return kNever;
    return shm_half_s(n, ranks, model.shm_sync_s, shm_beta, gamma, shm_seg, reduce) + overhead;
  }
  if (algo == Algorithm::hierarchical) {
    // Nodes of equal size only (hierarchical_scatter_gather.cpp); one node is shm.
    if (!several_nodes || k < 2 || ranks != nodes * k) return kNever;
    const double part = n / k;
    // The k ranks of a node move their parts across the node's link at once: β·k, as the
    // hierarchical all-reduce's inter-node step.
    const Fabric inter = fabric_of(model, Link{model.alpha_inter_s, model.beta_inter_s_per_byte * scale * k},
                                   model.nodes_per_switch);
    const double across = std::min(ring_half_s(part, nodes, inter, gamma, static_cast<double>(tuning.ring_segment_bytes), reduce),
                                   halving_doubling_s(part, nodes, inter, gamma, reduce));
    return shm_half_s(n, k, model.shm_sync_s, shm_beta, gamma, shm_seg, reduce) + across +
           (reduce ? 0.0 : part * shm_beta) + overhead;
  }
  const Fabric link = fabric_of(model,
                                several_nodes ? Link{model.alpha_inter_s, model.beta_inter_s_per_byte * scale}
                                              : Link{model.alpha_intra_s, model.beta_intra_s_per_byte * scale},
                                static_cast<std::size_t>(k) * model.nodes_per_switch);
  const double t = algo == Algorithm::ring
                       ? ring_half_s(n, ranks, link, gamma, static_cast<double>(tuning.ring_segment_bytes), reduce)
                       : halving_doubling_s(n, ranks, link, gamma, reduce);
  return t + overhead;
}

/// The cheapest of ring, rabenseifner (halving / doubling), shm and hierarchical among
/// auto_algorithms; ties go to the earlier one, none allowed to the ring.
Algorithm cheaper_scatter_gather(const Tuning& tuning, std::size_t bytes, int ranks, int ranks_per_node,
                                 bool reduce) noexcept {
  Algorithm best = Algorithm::ring;
  double best_s = std::numeric_limits<double>::infinity();
  for (Algorithm a : {Algorithm::ring, Algorithm::rabenseifner, Algorithm::shm, Algorithm::hierarchical}) {
    if (!(tuning.auto_algorithms & detail::bit(a))) continue;
    const double s = scatter_gather_s(tuning, a, bytes, ranks, ranks_per_node, reduce);
    if (s < best_s) {
      best = a;
      best_s = s;
    }
  }
  return best;
}

}  // namespace

double Tuning::predict_reduce_scatter_s(Algorithm algo, std::size_t bytes, int ranks, int ranks_per_node) const noexcept {
  return scatter_gather_s(*this, algo, bytes, ranks, ranks_per_node, true);
}
double Tuning::predict_allgather_s(Algorithm algo, std::size_t bytes, int ranks, int ranks_per_node) const noexcept {
  return scatter_gather_s(*this, algo, bytes, ranks, ranks_per_node, false);
}
Algorithm Tuning::choose_reduce_scatter(std::size_t bytes, int ranks, int ranks_per_node) const noexcept {
  return cheaper_scatter_gather(*this, bytes, ranks, ranks_per_node, true);
}
Algorithm Tuning::choose_allgather(std::size_t bytes, int ranks, int ranks_per_node) const noexcept {
  return cheaper_scatter_gather(*this, bytes, ranks, ranks_per_node, false);
}

Algorithm Tuning::choose_allreduce(std::size_t bytes, int ranks, int ranks_per_node) const noexcept {
  if (allreduce_algorithm != Algorithm::automatic) return allreduce_algorithm;
  return cheapest_allreduce(bytes, ranks, ranks_per_node, auto_algorithms);
}

Algorithm Tuning::cheapest_allreduce(std::size_t bytes, int ranks, int ranks_per_node,
                                     std::uint32_t candidates) const noexcept {
  Algorithm best = Algorithm::ring;
  double best_s = std::numeric_limits<double>::infinity();
  for (Algorithm a : detail::kModelled) {
    if (!(candidates & detail::bit(a))) continue;
    const double s = predict_allreduce_s(a, bytes, ranks, ranks_per_node);
    if (s < best_s) {
      best = a;
      best_s = s;
    }
  }
  return best;
}

}  // namespace hpctrain::coll
