#pragma once
// Element-wise reduction kernels used by every algorithm (host memory).

#include <cstddef>

#include "hpctrain/collectives/types.hpp"

namespace hpctrain::coll::detail {

/// inout[i] = inout[i] (op) in[i] for i < count. `op` is sum, prod, min or max (avg is reduced
/// as sum and scaled once at the end). f16/bf16 are combined in float and rounded once.
void reduce_into(void* inout, const void* in, std::size_t count, DataType type, ReduceOp op);

/// out[i] = a[i] (op) b[i] for i < count; `out` may be `a` (then as reduce_into), otherwise
/// the buffers must not overlap. Same element order as reduce_into, so the same bits.
void reduce_to(void* out, const void* a, const void* b, std::size_t count, DataType type, ReduceOp op);

/// buf[i] /= ranks (float types) or truncating integer division (integer types).
void divide_by(void* buf, std::size_t count, DataType type, int ranks);

/// out[i] = bf16(float(a[i]) + float(b[i])): reduce_to's bf16 sum, vectorised (half_kernels.cpp);
/// `out` may be `a` or `b`.
void sum_bf16(bf16* out, const bf16* a, const bf16* b, std::size_t n) noexcept;

/// The op the algorithms run for `op` (avg -> sum).
inline ReduceOp combine_op(ReduceOp op) noexcept { return op == ReduceOp::avg ? ReduceOp::sum : op; }

}  // namespace hpctrain::coll::detail
