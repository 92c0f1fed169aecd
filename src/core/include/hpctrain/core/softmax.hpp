#pragma once
/// @file
/// Softmax over the rows of a [rows, len] matrix, in place (self-attention's probabilities).

#include "hpctrain/core/kokkos_compat.hpp"
#include "hpctrain/core/tensor.hpp"

#include <cstdint>

namespace hpctrain::core {

/// One row of `len` elements at `row` becomes its softmax: the maximum, then exp(x - max) and
/// their sum in index order, then each times 1 / sum. softmax_rows' kernel and the attention's
/// leaves on the rank's threads (attention.cpp) both call it, so their bits are the same.
template <class T>
KOKKOS_INLINE_FUNCTION void softmax_row(T* row, std::int64_t len) {
  T m = row[0];
  for (std::int64_t j = 1; j < len; ++j) m = row[j] > m ? row[j] : m;
  T sum = 0;
  for (std::int64_t j = 0; j < len; ++j) {
    const T e = kmath::exp(row[j] - m);
    row[j] = e;
    sum += e;
  }
  const T inv = T(1) / sum;
  for (std::int64_t j = 0; j < len; ++j) row[j] *= inv;
}

/// One row of the softmax backward in place: dp <- p (dp - sum_j dp_j p_j), sum in index order.
template <class T>
KOKKOS_INLINE_FUNCTION void softmax_row_backward(const T* p, T* dp, std::int64_t len) {
  T dot = 0;
  for (std::int64_t j = 0; j < len; ++j) dot += dp[j] * p[j];
  for (std::int64_t j = 0; j < len; ++j) dp[j] = p[j] * (dp[j] - dot);
}

/// Each row of `s` becomes its softmax (softmax_row); stable: the row's maximum is subtracted before exp.
template <class T>
void softmax_rows(std::int64_t rows, std::int64_t len, const Vec<T>& s);

/// dp <- p (dp - sum_j dp_j p_j) per row, in place: the softmax backward, p the forward output.
template <class T>
void softmax_rows_backward(std::int64_t rows, std::int64_t len, const Vec<T>& p, const Vec<T>& dp);

}  // namespace hpctrain::core
