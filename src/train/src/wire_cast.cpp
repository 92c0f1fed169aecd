#include "wire_cast.hpp"

#include <cstring>

#include "hpctrain/base/error.hpp"
#include "hpctrain/base/vector_clones.hpp"

namespace hpctrain::train {

namespace {

/// The wrong cast: bf16 bits with the 8-bit exponent cut to its low 5 bits, or f16 bits whose
/// 5-bit exponent is the float's low 5 exponent bits without re-biasing. Gradients of size
/// 1e-3..1e-6 come out many orders of magnitude off.
std::uint16_t truncated_exponent(float f, coll::DataType type) {
  const std::uint16_t good = type == coll::DataType::bf16 ? coll::to_bf16(f).bits : coll::to_f16(f).bits;
  if (type == coll::DataType::bf16) return static_cast<std::uint16_t>(good & 0x8fffu);  // exponent bits 7..5 gone
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const auto exponent = static_cast<std::uint16_t>((u >> 23) & 0x1fu);
  return static_cast<std::uint16_t>(((u >> 16) & 0x8000u) | (exponent << 10) | ((u >> 13) & 0x3ffu));
}

}  // namespace

void pack_wire(const float* grads, std::uint16_t* wire, std::size_t count, coll::DataType type, WireCast cast) {
  HPCTRAIN_REQUIRE(type == coll::DataType::bf16 || type == coll::DataType::f16,
                   "pack_wire: the wire type must be bf16 or f16");
  if (cast == WireCast::truncated_exponent_test) {
    for (std::size_t i = 0; i < count; ++i) wire[i] = truncated_exponent(grads[i], type);
  } else if (type == coll::DataType::bf16) {
    static_assert(sizeof(coll::bf16) == sizeof(std::uint16_t), "bf16 is its 16 bits");
    coll::to_bf16(grads, reinterpret_cast<coll::bf16*>(wire), count);
  } else {
    for (std::size_t i = 0; i < count; ++i) wire[i] = coll::to_f16(grads[i]).bits;
  }
}

namespace {

/// bf16 with feedback in one pass (the common case): the element functions are branch-free, so
/// the loop vectorises (this file is compiled at -O3, src/train/CMakeLists.txt).
HPCTRAIN_VECTOR_CLONES void bf16_with_feedback(float* __restrict grads, float* __restrict residual,
                                               std::uint16_t* __restrict wire, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) {
    const float x = grads[i] + residual[i];
    const coll::bf16 sent = coll::to_bf16(x);
    grads[i] = x;
    wire[i] = sent.bits;
    residual[i] = x - coll::to_float(sent);
  }
}

}  // namespace

void pack_wire_with_feedback(float* grads, float* residual, std::uint16_t* wire, std::size_t count,
                             coll::DataType type, WireCast cast) {
  if (type == coll::DataType::bf16 && cast == WireCast::round_to_nearest) {
    bf16_with_feedback(grads, residual, wire, count);
    return;
  }
  for (std::size_t i = 0; i < count; ++i) grads[i] += residual[i];
  pack_wire(grads, wire, count, type, cast);
  unpack_wire(wire, residual, count, type);  // then the error: compensated value − what was sent
  for (std::size_t i = 0; i < count; ++i) residual[i] = grads[i] - residual[i];
}

void unpack_wire(const std::uint16_t* wire, float* grads, std::size_t count, coll::DataType type) {
  if (type == coll::DataType::bf16) {
    coll::to_float(reinterpret_cast<const coll::bf16*>(wire), grads, count);
  } else {
    for (std::size_t i = 0; i < count; ++i) grads[i] = coll::to_float(coll::f16{wire[i]});
  }
}

}  // namespace hpctrain::train
