#pragma once
// Gradients on a 16-bit wire (--grad-dtype bf16|f16): the cast of a bucket before its
// collective and back after it. The reduction itself adds in f32 (collectives' reduce kernels)
// and the optimiser keeps f32 master weights, so only the values that travel are rounded.

#include <cstddef>
#include <cstdint>

#include "hpctrain/collectives/types.hpp"
#include "hpctrain/train/data_parallel.hpp"

namespace hpctrain::train {

/// wire[i] = the 16-bit `type` (bf16 or f16) of grads[i], rounded to nearest even, or with
/// WireCast::truncated_exponent_test the deliberately wrong cast tests use to show that the
/// accuracy check can fail (the exponent keeps only its low 5 bits).
void pack_wire(const float* grads, std::uint16_t* wire, std::size_t count, coll::DataType type, WireCast cast);
/// Error feedback: grads[i] += residual[i], wire[i] = the cast of that (as pack_wire), and
/// residual[i] = grads[i] − float(wire[i]), the rounding error the next call adds back.
/// `grads` is left holding the compensated values.
void pack_wire_with_feedback(float* grads, float* residual, std::uint16_t* wire, std::size_t count,
                             coll::DataType type, WireCast cast);
/// grads[i] = float(wire[i]) (exact).
void unpack_wire(const std::uint16_t* wire, float* grads, std::size_t count, coll::DataType type);

}  // namespace hpctrain::train
