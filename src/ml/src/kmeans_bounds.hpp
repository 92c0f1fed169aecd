#pragma once
// Lloyd assignments that skip the samples whose nearest centroid cannot have changed (Hamerly's
// bounds), with the labels, sums and counts of the full pass to the bit; the schedule, the
// safety margin and its derivation are in kmeans_bounds.cpp. Internal to hpctrain::ml.
#include <cstdint>
#include <vector>

#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/ml/dataset_slice.hpp"
#include "hpctrain/ml/sample_partition.hpp"

#include "centroid_search.hpp"

namespace hpctrain::ml::detail {

/// One assignment of all ranks' samples to their nearest centroids: per cluster the sum of its
/// samples (k x d, exact_sum_over_samples) and their count (int64), the inertia, and each local
/// sample's squared distance to its centroid (full passes only; HamerlyBounds::distances).
struct Assignment {
  std::vector<double> sums;
  std::vector<std::int64_t> counts;
  std::vector<double> d2;
  double inertia = 0.0;
};

/// Per local sample an upper bound on the distance to its centroid and a lower bound on the
/// distance to every other one, kept across Lloyd iterations; `assign` computes the scores of
/// the samples whose bounds leave their label in doubt only, and re-sums the sum blocks whose
/// clusters lost or gained a sample only.
class HamerlyBounds {
 public:
  HamerlyBounds(const SamplePartition& part, const DatasetSlice& data, std::int64_t k, bool f32_products);

  /// Collective: the assignment to `centroids`, labels, sums and counts with the bits of the
  /// full pass (kmeans.cpp's assign). The inertia is sum_c Q_c - 2 c.S_c + n_c ||c||^2 from
  /// exact sums (Q_c = sum of ||x||^2 over the cluster): the same at any P, equal to the full
  /// pass's direct sum up to rounding only. `d2` is left empty.
  Assignment assign(coll::Communicator& comm, const std::vector<double>& centroids);
  /// Moves the bounds by the shift of each centroid from `before` to `after` (the update).
  void move(const std::vector<double>& before, const std::vector<double>& after);
  /// Each local sample's squared distance to its centroid in `centroids` (the last assign's
  /// labels), with the bits of the full pass's d2.
  std::vector<double> distances(const std::vector<double>& centroids) const;
  /// Local samples whose scores the last assign computed.
  std::int64_t searched() const noexcept { return searched_; }

 private:
  bool settled(std::int64_t i, double largest_norm) const noexcept;
  void search_block(CentroidSearch& search, const std::vector<double>& centroids, double largest_norm,
                    std::int64_t block);
  void record(std::int64_t i, std::int64_t label, double d2, double gap, double largest_norm);
  void rebuild_terms(std::int64_t block);

  const SamplePartition& part_;
  const DatasetSlice& data_;
  std::int64_t k_, d_;
  bool f32_;
  double slack_;        ///< relative rounding allowance of the f64 bound arithmetic
  double score_error_;  ///< gamma of the products' precision (the margin's factor)
  std::size_t width_;   ///< a block term: k x d sums, then k sums of ||x||^2
  std::vector<std::int64_t> label_;    ///< -1 before the first assign
  std::vector<double> upper_, lower_;  ///< Euclidean distances, not squared
  std::vector<double> terms_;          ///< block_count x width_, the full pass's block terms
  std::vector<char> dirty_;            ///< the clusters of the current block that changed
  std::vector<double> rows_;           ///< widened rows, scratch
  std::vector<double> origin_;         ///< d zeros, for ||x||^2
  std::vector<std::int64_t> pending_, found_label_;
  std::vector<double> found_d2_, found_gap_;
  std::int64_t searched_ = 0;
};

}  // namespace hpctrain::ml::detail
