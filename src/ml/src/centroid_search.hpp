#pragma once
// The nearest-centroid search of one set of centroids, prepared once (||c||^2, the float copies)
// and run on a few f64 rows at a time. Internal to hpctrain::ml (kmeans.cpp, kmeans_bounds.cpp).
#include <cstdint>
#include <vector>

namespace hpctrain::ml::detail {

/// The nearest centroid of each of n rows x (f64, row-major), as nearest_centroids (f64 dgemm)
/// or nearest_centroids_f32 (float dots) pick it: label[i] = argmin_c ||c||^2 - 2 x_i.c (ties
/// to the lowest index), d2[i] = squared_distance(x_i, c_label), and gap[i] = the second lowest
/// score minus the lowest (+inf when k = 1), the slack the argmin had.
///
/// Bits: with f32 products a row's results depend on the row and the centroids alone, so any
/// grouping of rows gives the same bits. With f64 products the dgemm's bits may depend on the
/// rows beside a row: call it on the 64-row sub-blocks nearest_centroids uses (kSubBlockRows
/// from the start of a sum block) to get nearest_centroids' bits.
class CentroidSearch {
 public:
  CentroidSearch(const std::vector<double>& centroids, std::int64_t k, std::int64_t d, bool f32_products);

  /// At most this many rows per call (16 with f32 products, 64 with f64).
  std::int64_t rows_per_call() const noexcept;
  void nearest(const double* x, std::int64_t n, std::int64_t* label, double* d2, double* gap);
  /// ||c||^2 of each centroid (squared_distance to the origin), the norms the scores use.
  const std::vector<double>& norms() const noexcept { return norms_; }

 private:
  const std::vector<double>& centroids_;
  std::int64_t k_, d_;
  bool f32_;
  std::vector<double> norms_;
  std::vector<float> c32_, x32_, dots32_;
  std::vector<double> dots64_;
};

}  // namespace hpctrain::ml::detail
