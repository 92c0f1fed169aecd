#include "hpctrain/collectives/types.hpp"

#include <cmath>
#include <string>

#include "hpctrain/base/error.hpp"

namespace hpctrain::coll {

namespace {
std::uint32_t bits_of(float f) noexcept {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
float float_of(std::uint32_t u) noexcept {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
}  // namespace

float to_float(f16 h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h.bits & 0x8000u) << 16;
  const std::uint32_t exponent = (h.bits >> 10) & 0x1fu;
  const std::uint32_t mantissa = h.bits & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in float
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return float_of(sign | 0x7f800000u | (mantissa << 13));  // inf / NaN
  return float_of(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

f16 to_f16(float f) noexcept {
  const std::uint32_t x = bits_of(f);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  std::uint32_t magnitude = x & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) {  // inf or NaN (NaN stays a quiet NaN)
    return f16{static_cast<std::uint16_t>(sign | 0x7c00u | (magnitude > 0x7f800000u ? 0x200u : 0u))};
  }
  if (magnitude >= 0x477ff000u) return f16{static_cast<std::uint16_t>(sign | 0x7c00u)};  // >= 65520
  if (magnitude < 0x38800000u) {  // below 2^-14: half subnormal (or zero), units of 2^-24
    // Scaling by 2^24 is exact; nearbyint rounds to nearest even in the default mode.
    const auto m = static_cast<std::uint32_t>(std::nearbyint(float_of(magnitude) * 0x1p24f));
    return f16{static_cast<std::uint16_t>(sign | m)};
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped bits to nearest even.
  magnitude += 0xc8000fffu + ((magnitude >> 13) & 1u);
  return f16{static_cast<std::uint16_t>(sign | (magnitude >> 13))};
}

std::size_t size_of(DataType t) noexcept {
  switch (t) {
    case DataType::f32: return 4;
    case DataType::f64: return 8;
    case DataType::f16: return 2;
    case DataType::bf16: return 2;
    case DataType::i32: return 4;
    case DataType::i64: return 8;
  }
  return 0;
}

std::string_view to_string(DataType t) noexcept {
  switch (t) {
    case DataType::f32: return "f32";
    case DataType::f64: return "f64";
    case DataType::f16: return "f16";
    case DataType::bf16: return "bf16";
    case DataType::i32: return "i32";
    case DataType::i64: return "i64";
  }
  return "?";
}

std::string_view to_string(ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::prod: return "prod";
    case ReduceOp::min: return "min";
    case ReduceOp::max: return "max";
    case ReduceOp::avg: return "avg";
  }
  return "?";
}

std::string_view to_string(Algorithm a) noexcept {
  switch (a) {
    case Algorithm::automatic: return "auto";
    case Algorithm::ring: return "ring";
    case Algorithm::tree: return "tree";
    case Algorithm::mpi: return "mpi";
    case Algorithm::recursive_doubling: return "recursive_doubling";
    case Algorithm::rabenseifner: return "rabenseifner";
    case Algorithm::shm: return "shm";
    case Algorithm::hierarchical: return "hierarchical";
    case Algorithm::nccl: return "nccl";
  }
  return "?";
}

Algorithm parse_algorithm(std::string_view name, std::string_view where) {
  if (name == "automatic") return Algorithm::automatic;
  for (const Algorithm a : kAllAlgorithms) {
    if (name == to_string(a)) return a;
  }
  HPCTRAIN_FAIL(std::string(where) + ": unknown all-reduce algorithm '" + std::string(name) +
                "' (expected one of: " + algorithm_names() + ")");
}

std::string algorithm_names() {
  std::string names;
  for (const Algorithm a : kAllAlgorithms) {
    if (!names.empty()) names += ", ";
    names += to_string(a);
  }
  return names;
}

}  // namespace hpctrain::coll
