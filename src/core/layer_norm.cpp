// Layer normalisation kernels (core/layer_norm.hpp).
//
// Forward, per row of D values: mean, biased variance by a second pass
// over the row (no cancellation as in E[x^2] - mean^2), rstd = 1 / sqrt(var + eps),
// y = (x - mean) rstd w + b. Backward with xhat = (x - mean) rstd and g = dy w:
//   dx = rstd (g - mean(g) - xhat mean(g xhat)),   dw += sum_rows dy xhat,   db += sum_rows dy.
// The row kernels run one row per thread (rows = N T is the wide extent; on the rank's OpenMP
// team where Kokkos is Serial, detail::host_parallel_for), their row sums in 8
// fixed lanes (lane_sum: vectorisable, same bits at any thread count); the parameter
// gradients sum fixed chunks of 64 rows along contiguous rows, then the chunks per column
// (deterministic at any thread count, no atomics; see accumulate_scale_shift_gradients).
// Deterministic training's grouped passes cut the rows into leaves: the chunks then restart at
// every leaf, each leaf's chunks are summed as the plain kernel sums a pass's, and the leaves'
// sums are added over core/leaf_tree.hpp's tree (layer_norm_parameter_gradients_leaf_tree).

#include "hpctrain/core/layer_norm.hpp"

#include "hpctrain/base/error.hpp"
#include "hpctrain/core/kokkos_compat.hpp"
#include "hpctrain/core/leaf_tree.hpp"
#include "host_parallel.hpp"

#include <string>

namespace hpctrain::core {

namespace {

/// Partial sums of a row reduction: element d goes to lane d % kLanes and the lanes are added
/// in lane order at the end. A fixed split (not the machine's vector width), so GCC vectorises
/// the loop at -O3 without reassociating and the bits are the same on every machine and at
/// every thread count. 8 lanes: two SSE vectors of float, one AVX-512 vector of double.
constexpr int kLanes = 8;

/// sum over d < n of f(d), in kLanes lanes.
template <class T, class F>
KOKKOS_INLINE_FUNCTION T lane_sum(std::int64_t n, const F& f) {
  T lane[kLanes] = {};
  std::int64_t d = 0;
  for (; d + kLanes <= n; d += kLanes) {
    for (int j = 0; j < kLanes; ++j) lane[j] += f(d + j);
  }
  for (int j = 0; d + j < n; ++j) lane[j] += f(d + j);
  T sum = 0;
  for (int j = 0; j < kLanes; ++j) sum += lane[j];
  return sum;
}

/// Rows per partial sum of the parameter gradients: a fixed count, not the thread count, so
/// the summation order (and the bits) depend on the number of rows only. 64 rows keep a
/// partial pair [2, dim] in L1 while a chunk streams through.
constexpr std::int64_t kRowsPerPartial = 64;

/// One chunk's partial [2, dim] at partial(pw..): dy xhat and dy over rows [r_begin, r_end) in
/// order, from zero. Both the plain and the leaf-tree kernels call it: the same additions.
template <class T>
KOKKOS_INLINE_FUNCTION void chunk_partial(const Vec<T>& x, const Vec<T>& dy, std::int64_t dim, const Vec<T>& mean,
                                          const Vec<T>& rstd, const Vec<T>& partial, std::int64_t pw,
                                          std::int64_t r_begin, std::int64_t r_end) {
  const std::int64_t pb = pw + dim;
  for (std::int64_t d = 0; d < 2 * dim; ++d) partial(pw + d) = 0;
  for (std::int64_t r = r_begin; r < r_end; ++r) {
    const T m = mean(r), s = rstd(r);
    const std::int64_t base = r * dim;
    for (std::int64_t d = 0; d < dim; ++d) {
      const T g = dy(base + d);
      partial(pw + d) += g * ((x(base + d) - m) * s);
      partial(pb + d) += g;
    }
  }
}

}  // namespace

template <class T>
void layer_norm_forward(const Vec<T>& x, std::int64_t rows, std::int64_t dim, T eps,
                    const Vec<T>& w, const Vec<T>& b, const Vec<T>& mean,
                    const Vec<T>& rstd, const Vec<T>& y) {
  detail::host_parallel_for(
      "hpctrain::layer_norm::forward", rows, KOKKOS_LAMBDA(const std::int64_t r) {
        const std::int64_t base = r * dim;
        const T m = lane_sum<T>(dim, [&](std::int64_t d) { return x(base + d); }) /
                    static_cast<T>(dim);
        const T v = lane_sum<T>(dim, [&](std::int64_t d) {
                      const T c = x(base + d) - m;
                      return c * c;
                    }) /
                    static_cast<T>(dim);
        const T s = T(1) / kmath::sqrt(v + eps);
        mean(r) = m;
        rstd(r) = s;
        for (std::int64_t d = 0; d < dim; ++d) y(base + d) = (x(base + d) - m) * s * w(d) + b(d);
      },
      dim);
}

template <class T>
void layer_norm_backward_input(const Vec<T>& x, const Vec<T>& dy, std::int64_t rows,
                             std::int64_t dim, const Vec<T>& w, const Vec<T>& mean,
                             const Vec<T>& rstd, const Vec<T>& dx) {
  detail::host_parallel_for(
      "hpctrain::layer_norm::backward_input", rows, KOKKOS_LAMBDA(const std::int64_t r) {
        const std::int64_t base = r * dim;
        const T m = mean(r), s = rstd(r);
        const T g_mean = lane_sum<T>(dim, [&](std::int64_t d) { return dy(base + d) * w(d); }) /
                         static_cast<T>(dim);
        const T gx_mean = lane_sum<T>(dim, [&](std::int64_t d) {
                            return dy(base + d) * w(d) * (x(base + d) - m) * s;
                          }) /
                          static_cast<T>(dim);
        for (std::int64_t d = 0; d < dim; ++d) {
          const T xhat = (x(base + d) - m) * s;
          dx(base + d) = s * (dy(base + d) * w(d) - g_mean - xhat * gx_mean);
        }
      },
      dim);
}

std::int64_t layer_norm_partial_rows(std::int64_t rows) {
  return (rows + kRowsPerPartial - 1) / kRowsPerPartial;
}

/// dw += sum_rows dy xhat and db += sum_rows dy in two passes. (1) One thread per chunk of
/// kRowsPerPartial rows: for each row in order, add dy xhat and dy to the chunk's partial
/// [2, dim] -- the inner loop runs along a row, contiguous and vectorisable (each column's
/// sum still adds rows in order). (2) One thread per column: add the chunks' partials in chunk
/// order. Reads x and dy once (2 R D loads, 4 R D flops) instead of striding by D per row.
template <class T>
void layer_norm_parameter_gradients(const Vec<T>& x, const Vec<T>& dy,
                                      std::int64_t rows, std::int64_t dim,
                                      const Vec<T>& mean, const Vec<T>& rstd,
                                      const Vec<T>& partial, const Vec<T>& dw,
                                      const Vec<T>& db) {
  const std::int64_t chunks = layer_norm_partial_rows(rows);
  detail::host_parallel_for(
      "hpctrain::layer_norm::backward_parameters_partial", chunks,
      KOKKOS_LAMBDA(const std::int64_t c) {
        const std::int64_t r_end = (c + 1) * kRowsPerPartial < rows ? (c + 1) * kRowsPerPartial
                                                                     : rows;
        chunk_partial(x, dy, dim, mean, rstd, partial, c * 2 * dim, c * kRowsPerPartial, r_end);
      },
      kRowsPerPartial * dim);
  detail::host_parallel_for(
      "hpctrain::layer_norm::backward_parameters", dim,
      KOKKOS_LAMBDA(const std::int64_t d) {
        T sw = 0, sb = 0;
        for (std::int64_t c = 0; c < chunks; ++c) {
          sw += partial(c * 2 * dim + d);
          sb += partial(c * 2 * dim + dim + d);
        }
        dw(d) += sw;
        db(d) += sb;
      },
      chunks);
}

std::int64_t layer_norm_leaf_tree_workspace(std::int64_t rows, std::int64_t dim, std::int64_t leaf_rows) {
  HPCTRAIN_REQUIRE(leaf_rows >= 1, "layer_norm: " + std::to_string(leaf_rows) + " rows per leaf");
  const std::int64_t leaves = leaf_count(rows, leaf_rows);
  const std::int64_t full_chunks = layer_norm_partial_rows(leaf_rows);
  const std::int64_t chunks = rows == 0 ? 0 : (leaves - 1) * full_chunks + layer_norm_partial_rows(rows - (leaves - 1) * leaf_rows);
  return 2 * dim * (chunks + leaves);
}

/// The plain kernels' two passes with chunks inside leaves: (1) one thread per chunk of every
/// leaf (leaf l's chunk c at partial row l C + c, C = a whole leaf's chunks); (2) one thread per
/// column of [dw | db]: each leaf's chunks added in order from zero (the plain pass's sum for
/// that leaf; its `+=` into zeroed gradients adds nothing), kept per leaf behind the partials,
/// then added over the leaf tree in place. As many launches as the plain kernels, whatever the
/// number of leaves.
template <class T>
void layer_norm_parameter_gradients_leaf_tree(const Vec<T>& x, const Vec<T>& dy, std::int64_t rows,
                                              std::int64_t dim, std::int64_t leaf_rows, const Vec<T>& mean,
                                              const Vec<T>& rstd, const Vec<T>& workspace, const Vec<T>& dw,
                                              const Vec<T>& db) {
  const std::int64_t needed = layer_norm_leaf_tree_workspace(rows, dim, leaf_rows);
  HPCTRAIN_REQUIRE(static_cast<std::int64_t>(workspace.extent(0)) >= needed,
                   "layer_norm: leaf-tree workspace of " + std::to_string(workspace.extent(0)) + " elements, " +
                       std::to_string(needed) + " needed");
  if (rows == 0) {
    Kokkos::deep_copy(dw, T(0));
    Kokkos::deep_copy(db, T(0));
    return;
  }
  const std::int64_t leaves = leaf_count(rows, leaf_rows), leaf_chunks = layer_norm_partial_rows(leaf_rows);
  const std::int64_t chunks = needed / (2 * dim) - leaves, sums = chunks * 2 * dim;
  const Vec<T> work = workspace;
  detail::host_parallel_for(
      "hpctrain::layer_norm::backward_parameters_partial_in_leaves", chunks,
      KOKKOS_LAMBDA(const std::int64_t c) {
        const std::int64_t leaf_first = (c / leaf_chunks) * leaf_rows;
        const std::int64_t leaf_end = leaf_first + leaf_rows < rows ? leaf_first + leaf_rows : rows;
        const std::int64_t first = leaf_first + (c % leaf_chunks) * kRowsPerPartial;
        const std::int64_t end = first + kRowsPerPartial < leaf_end ? first + kRowsPerPartial : leaf_end;
        chunk_partial(x, dy, dim, mean, rstd, work, c * 2 * dim, first, end);
      },
      kRowsPerPartial * dim);
  detail::host_parallel_for(
      "hpctrain::layer_norm::backward_parameters_leaf_tree", 2 * dim, KOKKOS_LAMBDA(const std::int64_t j) {
        for (std::int64_t l = 0; l < leaves; ++l) {
          const std::int64_t c_end = (l + 1) * leaf_chunks < chunks ? (l + 1) * leaf_chunks : chunks;
          T s = 0;
          for (std::int64_t c = l * leaf_chunks; c < c_end; ++c) s += work(c * 2 * dim + j);
          work(sums + l * 2 * dim + j) = s;
        }
        leaf_tree_sum_in_place(leaves, [&](std::int64_t l) -> T& { return work(sums + l * 2 * dim + j); });
        if (j < dim) {
          dw(j) = work(sums + j);
        } else {
          db(j - dim) = work(sums + j);
        }
      },
      chunks);
}

#define HPCTRAIN_INSTANTIATE(T)                                                                              \
  template void layer_norm_forward<T>(const Vec<T>&, std::int64_t, std::int64_t, T, const Vec<T>&, const Vec<T>&, \
                                      const Vec<T>&, const Vec<T>&, const Vec<T>&);                          \
  template void layer_norm_backward_input<T>(const Vec<T>&, const Vec<T>&, std::int64_t, std::int64_t,       \
                                             const Vec<T>&, const Vec<T>&, const Vec<T>&, const Vec<T>&);    \
  template void layer_norm_parameter_gradients<T>(const Vec<T>&, const Vec<T>&, std::int64_t, std::int64_t,  \
                                                  const Vec<T>&, const Vec<T>&, const Vec<T>&, const Vec<T>&, \
                                                  const Vec<T>&);                                  \
  template void layer_norm_parameter_gradients_leaf_tree<T>(                                                 \
      const Vec<T>&, const Vec<T>&, std::int64_t, std::int64_t, std::int64_t, const Vec<T>&, const Vec<T>&,  \
      const Vec<T>&, const Vec<T>&, const Vec<T>&);

HPCTRAIN_INSTANTIATE(float)
HPCTRAIN_INSTANTIATE(double)

}  // namespace hpctrain::core
