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

double fold_s(double n, int p, Link l, double gamma) {
  return p == (1 << floor_lg(p)) ? 0.0 : 2.0 * (l.alpha + n * l.beta) + n * gamma;
}

double ring_s(double n, int p, Link l, double gamma, double segment) {
  if (p <= 1) return 0.0;
  const double chunk = n / p;
  const double segments = std::max(1.0, std::ceil(chunk / segment));
  return 2.0 * (p - 1) * segments * l.alpha + 2.0 * (p - 1) * chunk * l.beta + (p - 1) * chunk * gamma;
}

double tree_s(double n, int p, Link l, double gamma, double segment, double binomial_max) {
  if (p <= 1) return 0.0;
  const double depth = ceil_lg(p);
  // Binomial: the reduce's last and the broadcast's first step are one exchange (tree_allreduce.cpp).
  if (n <= binomial_max) return (2.0 * depth - 1.0) * (l.alpha + n * l.beta) + depth * n * gamma;
  const double s = std::min(segment, n / 2);
  const double steps = depth + std::ceil(n / (2 * s)) - 1;
  return steps * (4.0 * l.alpha + 4.0 * s * l.beta + 2.0 * s * gamma);
}

double recursive_doubling_s(double n, int p, Link l, double gamma) {
  if (p <= 1) return 0.0;
  return floor_lg(p) * (l.alpha + n * l.beta + n * gamma) + fold_s(n, p, l, gamma);
}

double rabenseifner_s(double n, int p, Link l, double gamma) {
  if (p <= 1) return 0.0;
  const int lg = floor_lg(p);
  const double q = static_cast<double>(1 << lg);
  return 2.0 * lg * l.alpha + 2.0 * (q - 1) / q * n * l.beta + (q - 1) / q * n * gamma +
         fold_s(n, p, l, gamma);
}

// Reduce-scatter / all-gather of the whole n-byte vector (tuning.hpp gives the formulas).
double ring_half_s(double n, int p, Link l, double gamma, double segment, bool reduce) {
  if (p <= 1) return 0.0;
  const double chunk = n / p;
  const double segments = std::max(1.0, std::ceil(chunk / segment));
  return (p - 1) * segments * l.alpha + (p - 1) * chunk * l.beta + (reduce ? (p - 1) * chunk * gamma : 0.0);
}

double halving_doubling_s(double n, int p, Link l, double gamma, bool reduce) {
  if (p <= 1) return 0.0;
  const int lg = floor_lg(p);
  const double q = static_cast<double>(1 << lg);
  double t = lg * l.alpha + (q - 1) / q * n * l.beta + (reduce ? (q - 1) / q * n * gamma : 0.0);
  if (p != (1 << lg)) t += 2.0 * l.alpha + (n + n / p) * l.beta + (reduce ? n * gamma : 0.0);
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
  if (algo == Algorithm::automatic || algo == Algorithm::mpi || ranks < 1) return kNever;
  const double n = static_cast<double>(bytes);
  // The terms in α and synchronisations stay; every β and γ is scaled by the calibration.
  return formula_s(algo, n, ranks, ranks_per_node, model.calibration(algo, n)) +
         model.overhead_s[static_cast<std::size_t>(algo)];
}

double Tuning::formula_s(Algorithm algo, double n, int ranks, int ranks_per_node, double byte_scale) const noexcept {
  constexpr double kNever = std::numeric_limits<double>::infinity();
  if (algo == Algorithm::automatic || algo == Algorithm::mpi || ranks < 1) return kNever;
  const int k = (ranks_per_node <= 0 || ranks_per_node > ranks) ? ranks : ranks_per_node;
  const int nodes = (ranks + k - 1) / k;
  const double gamma = model.gamma_s_per_byte * byte_scale;
  const double shm_beta = model.shm_beta_s_per_byte * byte_scale;
  const double beta_inter = model.beta_inter_s_per_byte * byte_scale;
  const Link flat = nodes > 1 ? Link{model.alpha_inter_s, beta_inter}
                              : Link{model.alpha_intra_s, model.beta_intra_s_per_byte * byte_scale};
  const double ring_seg = static_cast<double>(ring_segment_bytes);
  const double tree_seg = static_cast<double>(tree_segment_bytes);
  const double binomial_max = static_cast<double>(tree_binomial_max_bytes);
  double t = kNever;
  switch (algo) {
    case Algorithm::ring: t = ring_s(n, ranks, flat, gamma, ring_seg); break;
    case Algorithm::tree: t = tree_s(n, ranks, flat, gamma, tree_seg, binomial_max); break;
    case Algorithm::recursive_doubling: t = recursive_doubling_s(n, ranks, flat, gamma); break;
    case Algorithm::rabenseifner: t = rabenseifner_s(n, ranks, flat, gamma); break;
    case Algorithm::shm:
      if (nodes == 1) t = shm_s(n, ranks, model.shm_sync_s, shm_beta, gamma);
      break;
    case Algorithm::hierarchical:
      if (nodes >= 2 && k > 1) {
        const double slice = n / k;
        const Link inter{model.alpha_inter_s, beta_inter * k};
        const double across = std::min({ring_s(slice, nodes, inter, gamma, ring_seg),
                                        tree_s(slice, nodes, inter, gamma, tree_seg, binomial_max),
                                        recursive_doubling_s(slice, nodes, inter, gamma),
                                        rabenseifner_s(slice, nodes, inter, gamma)});
        t = 2.0 * model.shm_sync_s + 2.0 * n * shm_beta + (k - 1.0) / k * n * gamma + across;
      }
      break;
    case Algorithm::automatic:
    case Algorithm::mpi: break;
  }
  return t;
}

namespace {

double scatter_gather_s(const Tuning& tuning, Algorithm algo, std::size_t bytes, int ranks, int ranks_per_node,
                        bool reduce) noexcept {
  constexpr double kNever = std::numeric_limits<double>::infinity();
  if ((algo != Algorithm::ring && algo != Algorithm::rabenseifner && algo != Algorithm::shm) || ranks < 1)
    return kNever;
  const CostModel& model = tuning.model;
  const double n = static_cast<double>(bytes);
  const double scale = model.calibration(algo, n);
  const int k = (ranks_per_node <= 0 || ranks_per_node > ranks) ? ranks : ranks_per_node;
  const bool several_nodes = (ranks + k - 1) / k > 1;
  if (algo == Algorithm::shm) {
    if (several_nodes) return kNever;
    return shm_half_s(n, ranks, model.shm_sync_s, model.shm_beta_s_per_byte * scale, model.gamma_s_per_byte * scale,
                      static_cast<double>(tuning.shm_segment_bytes), reduce) +
           model.overhead_s[static_cast<std::size_t>(algo)];
  }
  const Link link = several_nodes ? Link{model.alpha_inter_s, model.beta_inter_s_per_byte * scale}
                                  : Link{model.alpha_intra_s, model.beta_intra_s_per_byte * scale};
  const double gamma = model.gamma_s_per_byte * scale;
  const double t = algo == Algorithm::ring
                       ? ring_half_s(n, ranks, link, gamma, static_cast<double>(tuning.ring_segment_bytes), reduce)
                       : halving_doubling_s(n, ranks, link, gamma, reduce);
  return t + model.overhead_s[static_cast<std::size_t>(algo)];
}

/// The cheapest of ring, rabenseifner (halving / doubling) and shm among auto_algorithms; ties go
/// to the earlier one, none allowed to the ring.
Algorithm cheaper_scatter_gather(const Tuning& tuning, std::size_t bytes, int ranks, int ranks_per_node,
                                 bool reduce) noexcept {
  Algorithm best = Algorithm::ring;
  double best_s = std::numeric_limits<double>::infinity();
  for (Algorithm a : {Algorithm::ring, Algorithm::rabenseifner, Algorithm::shm}) {
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
