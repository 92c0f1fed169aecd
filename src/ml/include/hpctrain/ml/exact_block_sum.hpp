#pragma once
/// @file
/// Sums over samples whose bits do not depend on the rank count.
///
/// Schedule: every rank computes, for each sum block it owns (sample_partition.hpp), the
/// block's term, a vector of `width` doubles summed over the block's samples in global order
/// (the caller's `block_term`). The terms of all B blocks of all ranks are then added exactly
/// by coll::ReproducibleSum with one fixed-point scale per element (K = B terms). A block's term
/// is a function of the data alone, the exact sum of the terms is a function of the terms
/// alone, so the result is the same double at P = 1, 2, 3, ...
/// Cost: the caller's pass over the local samples (γ), the local terms held once
/// (block_count * width doubles), an all-reduce(max) of 2 * width int64 and an all-reduce(sum)
/// of width int64 (α + 24 width β).
/// Accuracy: each block sum carries at most 1024 ulp-scale roundings; the sum over blocks is
/// within B * 2^(ceil lg B - 63) of the largest block term per element (reproducible_sum.hpp).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/ml/sample_partition.hpp"

namespace hpctrain::ml {

/// Fills `term` (width doubles, zeroed by the caller) with the sum over the local samples
/// [first, first + count) (indices relative to SamplePartition::first_sample), in order.
using BlockTerm = std::function<void(std::int64_t first, std::int64_t count, double* term)>;

/// Collective: the sum over all N samples of the per-sample vectors that `block_term` adds up,
/// the same bits on every rank and at every rank count. A non-finite term anywhere makes the
/// whole element NaN.
std::vector<double> exact_sum_over_samples(coll::Communicator& comm, const SamplePartition& part,
                                           std::size_t width, const BlockTerm& block_term);

}  // namespace hpctrain::ml
