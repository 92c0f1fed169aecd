#pragma once
// Inputs and independent references for collective tests: every rank's input is a pure
// function of (seed, type, op, rank, index); the expected result is computed in float64 (or
// exact int64) from those inputs, never with the code under test.

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "hpctrain/collectives/types.hpp"

namespace hpctrain::coll::testing {

inline std::uint64_t mix(std::uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
/// Uniform in [0, 1).
inline double uniform(std::uint64_t seed, int rank, std::size_t i) {
  return static_cast<double>(mix(seed ^ mix(static_cast<std::uint64_t>(rank) * 0x100000001b3ull + i)) >> 11) *
         0x1p-53;
}

/// The value rank `rank` contributes at index i, as a double exactly representable in `type`.
inline double input_value(DataType type, ReduceOp op, std::uint64_t seed, int rank, std::size_t i) {
  const double u = uniform(seed, rank, i);
  const bool integer = type == DataType::i32 || type == DataType::i64;
  double v;
  if (op == ReduceOp::prod) {
    // Integers: factors in {-2,-1,1,2} (|product| <= 2^16 at 16 ranks); floats: [0.75, 1.25].
    v = integer ? std::array<double, 4>{-2, -1, 1, 2}[static_cast<std::size_t>(u * 4)] : 0.75 + 0.5 * u;
  } else {
    v = integer ? std::floor(u * 2001.0) - 1000.0 : 2.0 * u - 1.0;
  }
  switch (type) {  // round to what the type can hold
    case DataType::f32: return static_cast<float>(v);
    case DataType::f16: return to_float(to_f16(static_cast<float>(v)));
    case DataType::bf16: return to_float(to_bf16(static_cast<float>(v)));
    default: return v;
  }
}

inline void store(DataType type, void* buf, std::size_t i, double v) {
  switch (type) {
    case DataType::f32: static_cast<float*>(buf)[i] = static_cast<float>(v); break;
    case DataType::f64: static_cast<double*>(buf)[i] = v; break;
    case DataType::f16: static_cast<f16*>(buf)[i] = to_f16(static_cast<float>(v)); break;
    case DataType::bf16: static_cast<bf16*>(buf)[i] = to_bf16(static_cast<float>(v)); break;
    case DataType::i32: static_cast<std::int32_t*>(buf)[i] = static_cast<std::int32_t>(v); break;
    case DataType::i64: static_cast<std::int64_t*>(buf)[i] = static_cast<std::int64_t>(v); break;
  }
}

inline double load(DataType type, const void* buf, std::size_t i) {
  switch (type) {
    case DataType::f32: return static_cast<const float*>(buf)[i];
    case DataType::f64: return static_cast<const double*>(buf)[i];
    case DataType::f16: return to_float(static_cast<const f16*>(buf)[i]);
    case DataType::bf16: return to_float(static_cast<const bf16*>(buf)[i]);
    case DataType::i32: return static_cast<const std::int32_t*>(buf)[i];
    case DataType::i64: return static_cast<double>(static_cast<const std::int64_t*>(buf)[i]);
  }
  return 0;
}

/// Unit roundoff of the type's arithmetic (0 for exact integer types).
inline double unit_roundoff(DataType type) {
  switch (type) {
    case DataType::f32: return 0x1p-24;
    case DataType::f64: return 0x1p-53;
    case DataType::f16: return 0x1p-11;
    case DataType::bf16: return 0x1p-8;
    default: return 0.0;
  }
}

struct Expected {
  double value;      ///< exact (integers) or float64 reference
  double tolerance;  ///< 0 for integers and min/max
};

/// Reference for element i over `ranks` ranks, with an error bound that any summation order
/// satisfies: each of the at most p-1 additions (or multiplications) and each rounding of a
/// partial result to the type (one per hop for 16-bit types) contributes at most u times the
/// sum of magnitudes (for products: u times |product|, compounded). One more u for avg.
inline Expected expected_value(DataType type, ReduceOp op, std::uint64_t seed, int ranks, std::size_t i) {
  const double u = unit_roundoff(type);
  const bool integer = u == 0.0;
  double acc = input_value(type, op, seed, 0, i), magnitude = std::fabs(acc);
  std::int64_t iacc = static_cast<std::int64_t>(acc);
  for (int r = 1; r < ranks; ++r) {
    const double v = input_value(type, op, seed, r, i);
    magnitude += std::fabs(v);
    switch (op) {
      case ReduceOp::sum:
      case ReduceOp::avg: acc += v; iacc += static_cast<std::int64_t>(v); break;
      case ReduceOp::prod: acc *= v; iacc *= static_cast<std::int64_t>(v); break;
      case ReduceOp::min: acc = std::min(acc, v); break;
      case ReduceOp::max: acc = std::max(acc, v); break;
    }
  }
  if (integer) {
    if (op == ReduceOp::avg) iacc /= ranks;  // C++ truncation, as the library documents
    if (op == ReduceOp::min || op == ReduceOp::max) iacc = static_cast<std::int64_t>(acc);
    return {static_cast<double>(iacc), 0.0};
  }
  const double p = ranks;
  switch (op) {
    case ReduceOp::sum: return {acc, 2.0 * (p + 1.0) * u * magnitude};
    case ReduceOp::avg: return {acc / p, 2.0 * (p + 2.0) * u * magnitude / p};
    case ReduceOp::prod: return {acc, std::fabs(acc) * std::expm1(2.0 * (p + 1.0) * std::log1p(u))};
    default: return {acc, 0.0};
  }
}

inline void fill_input(DataType type, ReduceOp op, std::uint64_t seed, int rank, void* buf, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) store(type, buf, i, input_value(type, op, seed, rank, i));
}

/// Number of elements of `buf` outside the reference bound; the first one described in `first`.
/// With `stride` > 1 only every stride-th element (and the last) is checked.
inline std::size_t count_mismatches(DataType type, ReduceOp op, std::uint64_t seed, int ranks,
                                    const void* buf, std::size_t count, std::string* first,
                                    std::size_t stride = 1) {
  std::size_t bad = 0;
  for (std::size_t i = 0; i < count; i = (i + stride < count || i + 1 == count) ? i + stride : count - 1) {
    const Expected e = expected_value(type, op, seed, ranks, i);
    const double got = load(type, buf, i);
    if (!(std::fabs(got - e.value) <= e.tolerance)) {
      if (bad++ == 0 && first) {
        std::ostringstream os;
        os << to_string(type) << " " << to_string(op) << " p=" << ranks << " count=" << count << " [" << i
           << "]: got " << got << ", expected " << e.value << " ± " << e.tolerance;
        *first = os.str();
      }
    }
  }
  return bad;
}

inline const std::vector<DataType>& all_types() {
  static const std::vector<DataType> v = {DataType::f32, DataType::f64, DataType::f16,
                                          DataType::bf16, DataType::i32, DataType::i64};
  return v;
}
inline const std::vector<ReduceOp>& all_ops() {
  static const std::vector<ReduceOp> v = {ReduceOp::sum, ReduceOp::prod, ReduceOp::min, ReduceOp::max,
                                          ReduceOp::avg};
  return v;
}

}  // namespace hpctrain::coll::testing
