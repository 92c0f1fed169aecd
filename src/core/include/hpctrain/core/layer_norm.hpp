#pragma once
/// @file
/// Layer-normalisation kernels over the rows of a [rows, dim] tensor (PyTorch's LayerNorm):
/// y = (x - mean) rstd w + b per row, biased variance. Row sums in fixed lanes and the
/// parameter gradients in fixed chunks of rows, so the bits do not depend on the thread count.
/// Parameter-gradient kernels *accumulate*; the others overwrite their outputs.

#include "hpctrain/core/tensor.hpp"

#include <cstdint>

namespace hpctrain::core {

/// y = (x - mean) rstd w + b per row; mean[r] and rstd[r] = 1 / sqrt(var + eps) are kept for backward.
template <class T>
void layer_norm_forward(const Vec<T>& x, std::int64_t rows, std::int64_t dim, T eps, const Vec<T>& w,
                        const Vec<T>& b, const Vec<T>& mean, const Vec<T>& rstd, const Vec<T>& y);

/// dx = rstd (g - mean(g) - xhat mean(g xhat)) per row, g = dy w, xhat = (x - mean) rstd.
template <class T>
void layer_norm_backward_input(const Vec<T>& x, const Vec<T>& dy, std::int64_t rows, std::int64_t dim,
                               const Vec<T>& w, const Vec<T>& mean, const Vec<T>& rstd, const Vec<T>& dx);

/// Chunks of rows the parameter gradients are summed in: `partial` below holds
/// 2 * dim * layer_norm_partial_rows(rows) elements.
std::int64_t layer_norm_partial_rows(std::int64_t rows);

/// dw += sum over rows of dy xhat, db += sum over rows of dy (`partial`: workspace, see above).
template <class T>
void layer_norm_parameter_gradients(const Vec<T>& x, const Vec<T>& dy, std::int64_t rows, std::int64_t dim,
                                    const Vec<T>& mean, const Vec<T>& rstd, const Vec<T>& partial,
                                    const Vec<T>& dw, const Vec<T>& db);

/// Workspace elements of layer_norm_parameter_gradients_leaf_tree() over `rows` rows in leaves
/// of `leaf_rows` rows: each leaf's chunks' partials and each leaf's sums.
std::int64_t layer_norm_leaf_tree_workspace(std::int64_t rows, std::int64_t dim, std::int64_t leaf_rows);

/// Deterministic training's grouped passes: dw and db *written* as the sums of the rows cut into
/// leaves of `leaf_rows` rows (the last may be shorter), added over core/leaf_tree.hpp's tree;
/// leaf l's terms are the bits layer_norm_parameter_gradients() adds for its rows alone into
/// zeros (its chunks start at the leaf's first row). `workspace`: see above.
template <class T>
void layer_norm_parameter_gradients_leaf_tree(const Vec<T>& x, const Vec<T>& dy, std::int64_t rows,
                                              std::int64_t dim, std::int64_t leaf_rows, const Vec<T>& mean,
                                              const Vec<T>& rstd, const Vec<T>& workspace, const Vec<T>& dw,
                                              const Vec<T>& db);

}  // namespace hpctrain::core
