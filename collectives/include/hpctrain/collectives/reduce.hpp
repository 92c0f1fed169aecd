#pragma once
/// @file
/// The element-wise reduction kernel every all-reduce algorithm runs, exposed so that
/// `hpctrain tune-collectives` can time it (the γ of the cost model, tuning.hpp).

#include <cstddef>

#include "hpctrain/collectives/types.hpp"

namespace hpctrain::coll {

/// inout[i] = inout[i] (op) in[i] for i < count, host memory, the same kernel the algorithms
/// use (avg reduces as sum). The buffers must not overlap.
void reduce_into(void* inout, const void* in, std::size_t count, DataType type, ReduceOp op);

}  // namespace hpctrain::coll
