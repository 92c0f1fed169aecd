#pragma once
// The affine map y[rows, out] = x[rows, in] W^T + b and its backward, shared by Dense (one row
// per sample), TokenDense (one row per token) and the transformer's projections. Private to
// hpctrain::models.
//
// Leaf rows (deterministic training's grouped passes): with leaf_rows > 0 the rows are cut into
// leaves of that many rows (the last may be shorter); every leaf's rows of y and dx have the bits
// a call on that leaf alone gives them, and dW and db are *written* as the leaves' separate
// gradients (each as a call on that leaf alone writes it, or adds it into zeros: the same bits)
// added over core/leaf_tree.hpp's tree.

#include "hpctrain/core/elementwise.hpp"
#include "hpctrain/core/gemm.hpp"
#include "hpctrain/core/tensor.hpp"

#include <cstdint>

namespace hpctrain::models::detail {

/// y = x W^T + b over `rows` rows; W is [out, in] and b is [out]. In leaves where leaf_rows > 0.
template <class T>
void row_affine_forward(const core::Vec<T>& x, std::int64_t rows, std::int64_t in,
                        std::int64_t out, const core::Vec<T>& w, const core::Vec<T>& b,
                        const core::Vec<T>& y, std::int64_t leaf_rows = 0) {
  if (leaf_rows > 0) {
    core::linear_forward_in_leaves(leaf_rows, core::as_matrix(x, rows, in), core::as_matrix(w, out, in), b,
                                   core::as_matrix(y, rows, out));
    return;
  }
  core::linear_forward(core::as_matrix(x, rows, in), core::as_matrix(w, out, in), b,
                       core::as_matrix(y, rows, out));
}

/// dW += dy^T x, db += column sums of dy (with `write_gradients`: dW = dy^T x, db = the column
/// sums), and, when `dx` is non-empty, dx = dy W (overwritten). In leaves where leaf_rows > 0,
/// the gradients then written whatever `write_gradients` says.
template <class T>
void row_affine_backward(const core::Vec<T>& dy, const core::Vec<T>& x, std::int64_t rows,
                         std::int64_t in, std::int64_t out, const core::Vec<T>& w,
                         const core::Vec<T>& dw, const core::Vec<T>& db, const core::Vec<T>& dx,
                         bool write_gradients = false, std::int64_t leaf_rows = 0) {
  const core::Matrix<T> dym = core::as_matrix(dy, rows, out);
  if (leaf_rows > 0) {
    core::gemm_tn_leaf_tree(leaf_rows, dym, core::as_matrix(x, rows, in), core::as_matrix(dw, out, in));
    core::column_sums_leaf_tree(leaf_rows, dym, db);
    if (dx.data() == nullptr) return;
    core::gemm_in_leaves(leaf_rows, core::Trans::no, T(1), dym, core::as_matrix(w, out, in), T(0),
                         core::as_matrix(dx, rows, in));
    return;
  }
  core::gemm(core::Trans::yes, core::Trans::no, T(1), dym, core::as_matrix(x, rows, in),
             write_gradients ? T(0) : T(1), core::as_matrix(dw, out, in));
  if (write_gradients) core::set_zero(db);
  core::accumulate_column_sums(dym, db);
  if (dx.data() == nullptr) return;
  core::gemm(core::Trans::no, core::Trans::no, T(1), dym, core::as_matrix(w, out, in), T(0),
             core::as_matrix(dx, rows, in));
}

}  // namespace hpctrain::models::detail
