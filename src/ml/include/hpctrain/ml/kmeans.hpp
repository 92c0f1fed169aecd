#pragma once
/// @file
/// k-means over all ranks, with results that have the same bits at any rank count.
///
/// Objective (scikit-learn's `inertia_`): the sum over all N samples of the squared Euclidean
/// distance to the nearest centroid, not divided by N.
///
/// Lloyd's algorithm. Each iteration: every rank assigns its samples to the nearest centroid
/// (nearest_centroids: the argmin of ||c||^2 - 2 x.c from dgemm, or from float dots with
/// f32_products, nearest_centroids_f32; ties to the lowest centroid index), and sums per
/// cluster the samples (f64) and their squared distances by sum block (exact_block_sum.hpp: exact, P-independent) and the counts
/// (int64, exact); the new centroid is the cluster's sum / count. A cluster left empty is
/// re-seeded with the sample farthest from its centroid (ties to the lowest global index; the
/// next empty cluster takes the next farthest). Stops (KMeansStop) by scikit-learn's rule — the
/// squared centre shift of an iteration, summed over all centroids, at most tol times the mean
/// over features of their variance — or by the relative inertia change |inertia_prev - inertia|
/// <= tol * inertia, or after max_iter iterations. The reported inertia is that of the returned
/// centroids (one more assignment pass).
/// Cost per iteration: N K d γ / P for the assignment, plus exact_sum_over_samples of K d + 1
/// elements (α + 24 (K d + 1) β) and an int64 all-reduce of K counts.
///
/// Initialisation (`KMeansInit`), all rank-independent:
/// - parallel: k-means|| (Bahmani et al. 2012): one counter-based random centre, then
///   init_rounds rounds in which each sample joins the candidates independently with
///   probability min(1, l d2 / phi) (l = oversampling k, d2 its squared distance to the nearest
///   candidate, phi the exact-order sum of d2), drawn from the counter-based RNG at (seed,
///   round, global index); candidates are gathered in global order, weighted by the samples
///   nearest to them (int64 counts), and reclustered into k on every rank alike by weighted
///   k-means++ and up to 30 weighted Lloyd iterations. Cost: init_rounds + 1 passes over the data,
///   each comparing the samples with that round's new candidates only (with f32_products, by
///   nearest_centroids_f32, as Lloyd's passes).
/// - plusplus: k-means++ (Arthur & Vassilvitskii 2007); the first centre is the sample at a
///   counter-based random index, each next one is drawn with probability proportional to the
///   squared distance to the nearest chosen centre. The draw u * total is located in the
///   per-block sums of squared distances, exchanged as one all-reduce of B doubles with one
///   non-zero per slot (exact), then scanned in global-index order: the same sample at any P.
/// - random: K distinct samples at counter-based random indices.

#include <cstdint>
#include <functional>
#include <vector>

#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/ml/dataset_slice.hpp"
#include "hpctrain/ml/sample_partition.hpp"

namespace hpctrain::ml {

enum class KMeansInit { parallel, plusplus, random };

/// The convergence test of the Lloyd iterations.
enum class KMeansStop {
  shift,    ///< scikit-learn's: sum_c ||c_new - c_old||^2 <= tol * mean_j var(x_j) (one data pass more)
  inertia,  ///< |inertia_prev - inertia| <= tol * inertia
};

struct KMeansOptions {
  std::int64_t k = 8;
  std::int64_t max_iter = 300;
  double tol = 1e-4;  ///< the tolerance of `stop`
  KMeansStop stop = KMeansStop::shift;
  /// Every nearest-centroid search (Lloyd's assignments, the k-means|| distance passes and the
  /// last pass for the reported inertia) picks the centroid from single-precision dots x.c
  /// (nearest_centroids_f32); the scores, the distances and the cluster sums stay double on the
  /// f64 rows, so a centroid is still the f64 mean of its samples. Near ties may pick another
  /// centroid than f64 dots would. Still the same bits at any P. false: f64 dgemm throughout.
  bool f32_products = false;
  /// With KMeansStop::shift: Lloyd's assignments skip, by Hamerly's bounds with a margin for
  /// the products' rounding (kmeans_bounds.cpp), the samples whose label cannot change; the
  /// labels, sums, centroids and iterations are those of the full passes, bit for bit. The
  /// inertia passed to on_iteration then comes from exact per-cluster sums (sum ||x||^2 -
  /// 2 c.S + n ||c||^2), equal to the full pass's up to rounding; the result's inertia is the
  /// full pass's. false (CLI --no-bounds): every sample's scores computed in every iteration.
  bool bounds = true;
  std::uint64_t seed = 0;
  KMeansInit init = KMeansInit::parallel;
  std::int64_t init_rounds = 5;  ///< k-means|| rounds (Bahmani et al. suggest ~5; Spark's default is 2)
  double oversampling = 2.0;     ///< k-means||: expected candidates per round = oversampling x k
  /// Called on every rank after each iteration with (iteration, inertia before the update).
  std::function<void(std::int64_t, double)> on_iteration;
};

struct KMeansResult {
  std::int64_t k = 0, features = 0;
  std::vector<double> centroids;  ///< k x features, row-major
  double inertia = 0.0;           ///< of `centroids` (see the file comment)
  std::int64_t iterations = 0;    ///< Lloyd iterations run
  bool converged = false;         ///< stopped by tol rather than max_iter
  std::int64_t reseeded = 0;      ///< empty clusters re-seeded, over all iterations
};

/// Collective: fits k-means to the samples of all ranks (each rank passes its slice of the
/// same partition). Throws hpctrain::Error for k <= 0, k > N, max_iter < 1 or tol < 0.
KMeansResult fit_kmeans(coll::Communicator& comm, const SamplePartition& part, const DatasetSlice& data,
                        const KMeansOptions& options);

/// Collective: purity of the clustering against the labels of `data` (read with labels):
/// (1/N) sum over clusters of the count of its most frequent label, each sample in the cluster
/// of its nearest centroid (nearest_centroids). Exact int64 counts: the same at any P.
double kmeans_purity(coll::Communicator& comm, const SamplePartition& part, const DatasetSlice& data,
                     const KMeansResult& model);

/// Collective: the initial centroids (k x features) of `options.init`.
std::vector<double> initial_centroids(coll::Communicator& comm, const SamplePartition& part,
                                      const DatasetSlice& data, const KMeansOptions& options);

/// Collective: sample `index` (global) of the data, broadcast from the rank that owns it.
std::vector<double> fetch_sample(coll::Communicator& comm, const SamplePartition& part, const DatasetSlice& data,
                                 std::int64_t index);

/// The centroid (k x d, row-major) nearest to each of `rows` samples x (row-major, d values
/// each): label[i] = argmin over c of ||c||^2 - 2 x_i.c, from one dgemm per 64 rows (ties to the
/// lowest index), and d2[i] = the squared distance to it (squared_distance). Call it on whole
/// sum blocks (sample_partition.hpp): the dgemm calls, hence the bits, are then the same at any
/// rank count.
///
/// With `sums` (k x d, row-major) each sample is also added to its centroid's row, in sample
/// order, inside the same 64-row pass, while the rows are still in the core's cache: the Lloyd
/// step's sums without a second pass over the samples from memory.
void nearest_centroids(const double* x, std::int64_t rows, std::int64_t d, const std::vector<double>& centroids,
                       std::int64_t k, std::int64_t* label, double* d2, double* sums = nullptr);

/// nearest_centroids of the slice's rows [first, first + rows), widened 64 rows at a time into a
/// buffer of its own (DatasetSlice::rows_f64; no copy for SliceStorage::f64): the same dgemm calls
/// on the same values, hence the same bits, as on the rows as f64, while reading 1 byte a value
/// of a uint8 slice from memory instead of 8.
void nearest_centroids(const DatasetSlice& data, std::int64_t first, std::int64_t rows,
                       const std::vector<double>& centroids, std::int64_t k, std::int64_t* label, double* d2,
                       double* sums = nullptr);

/// nearest_centroids with the nearest centroid picked from single-precision dots
/// (KMeansOptions::f32_products): each row is rounded to float and its dots x.c with the
/// centroids rounded to float come from centroid_dots_f32; the score ||c||^2 - 2 x.c, the squared
/// distance and the sums are double, from the f64 rows, as in nearest_centroids. A row's label
/// and d2 are functions of the row and the centroids alone: the same bits at any rank count and
/// for any grouping of rows (so any call pattern), and bits equal for a uint8 slice and its
/// values stored as f64.
void nearest_centroids_f32(const DatasetSlice& data, std::int64_t first, std::int64_t rows,
                           const std::vector<double>& centroids, std::int64_t k, std::int64_t* label, double* d2,
                           double* sums = nullptr);

/// dots (rows x k, row-major) = x (rows x d) times centroids^T (k x d), all float and row-major:
/// 16 lanes a dot (lane l adds the products of features j = l mod 16, a multiply then an add),
/// the lanes added by the fixed tree s8[i] = l[i] + l[i+8], s4[i] = s8[i] + s8[i+4],
/// s2[i] = s4[i] + s4[i+2], s2[0] + s2[1]. Every dot's bits depend on its row and centroid
/// alone, on every ISA clone (AVX-512, AVX2, baseline).
void centroid_dots_f32(const float* x, std::int64_t rows, std::int64_t d, const float* centroids, std::int64_t k,
                       float* dots) noexcept;

/// Squared Euclidean distance of two d-vectors: eight running sums over j mod 8, added in a
/// fixed order (vectorised; the bits depend on the data alone).
double squared_distance(const double* a, const double* b, std::int64_t d) noexcept;

}  // namespace hpctrain::ml
