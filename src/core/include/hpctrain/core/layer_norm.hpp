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

}  // namespace hpctrain::core
