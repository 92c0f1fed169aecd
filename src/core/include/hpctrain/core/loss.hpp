#pragma once
/// @file
/// Softmax cross-entropy over class logits.

#include "hpctrain/core/tensor.hpp"

#include <cstdint>

namespace hpctrain::core {

/// Numerically stable softmax cross-entropy on [rows, classes] logits (log-sum-exp with the
/// row maximum subtracted). Returns sum over local rows of -log softmax(z)[label], divided by
/// `global_batch`, so that adding the values of all ranks gives the global mean; writes
/// dlogits = (softmax(z) - onehot(label)) / global_batch. Throws on labels outside
/// [0, classes) or global_batch < rows.
template <class T>
double softmax_cross_entropy(const Tensor<T>& logits, const Labels& labels,
                             std::int64_t global_batch, const Tensor<T>& dlogits);

/// Number of rows whose largest logit (first on ties) is at the label.
template <class T>
std::int64_t count_correct(const Tensor<T>& logits, const Labels& labels);

}  // namespace hpctrain::core
