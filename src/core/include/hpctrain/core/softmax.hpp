#pragma once
/// @file
/// Softmax over the rows of a [rows, len] matrix, in place (self-attention's probabilities).

#include "hpctrain/core/tensor.hpp"

#include <cstdint>

namespace hpctrain::core {

/// Each row of `s` becomes its softmax; stable: the row's maximum is subtracted before exp.
template <class T>
void softmax_rows(std::int64_t rows, std::int64_t len, const Vec<T>& s);

/// dp <- p (dp - sum_j dp_j p_j) per row, in place: the softmax backward, p the forward output.
template <class T>
void softmax_rows_backward(std::int64_t rows, std::int64_t len, const Vec<T>& p, const Vec<T>& dp);

}  // namespace hpctrain::core
