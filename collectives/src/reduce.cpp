#include "reduce.hpp"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "hpctrain/collectives/error.hpp"

namespace hpctrain::coll::detail {

namespace {

// Integer sums and products wrap (two's complement) instead of overflowing (undefined in C++).
struct Sum {
  template <class T>
  T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
    } else {
      return a + b;
    }
  }
};
struct Prod {
  template <class T>
  T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
    } else {
      return a * b;
    }
  }
};
struct Min { template <class T> T operator()(T a, T b) const { return b < a ? b : a; } };
struct Max { template <class T> T operator()(T a, T b) const { return a < b ? b : a; } };

// Plain types: the compiler vectorises this loop.
template <class T, class Op>
void combine(T* __restrict inout, const T* __restrict in, std::size_t n, Op op) {
  for (std::size_t i = 0; i < n; ++i) inout[i] = op(inout[i], in[i]);
}

// 16-bit float types: widen to float, combine, round once.
template <class Half, class Op>
void combine_half(Half* __restrict inout, const Half* __restrict in, std::size_t n, Op op) {
  for (std::size_t i = 0; i < n; ++i) {
    const float r = op(to_float(inout[i]), to_float(in[i]));
    if constexpr (std::is_same_v<Half, f16>) inout[i] = to_f16(r);
    else inout[i] = to_bf16(r);
  }
}

template <class Op>
void dispatch_type(void* inout, const void* in, std::size_t n, DataType type, Op op) {
  switch (type) {
    case DataType::f32: return combine(static_cast<float*>(inout), static_cast<const float*>(in), n, op);
    case DataType::f64: return combine(static_cast<double*>(inout), static_cast<const double*>(in), n, op);
    case DataType::i32:
      return combine(static_cast<std::int32_t*>(inout), static_cast<const std::int32_t*>(in), n, op);
    case DataType::i64:
      return combine(static_cast<std::int64_t*>(inout), static_cast<const std::int64_t*>(in), n, op);
    case DataType::f16: return combine_half(static_cast<f16*>(inout), static_cast<const f16*>(in), n, op);
    case DataType::bf16: return combine_half(static_cast<bf16*>(inout), static_cast<const bf16*>(in), n, op);
  }
}

}  // namespace

void reduce_into(void* inout, const void* in, std::size_t count, DataType type, ReduceOp op) {
  if (count == 0) return;
  switch (combine_op(op)) {
    case ReduceOp::sum: return dispatch_type(inout, in, count, type, Sum{});
    case ReduceOp::prod: return dispatch_type(inout, in, count, type, Prod{});
    case ReduceOp::min: return dispatch_type(inout, in, count, type, Min{});
    case ReduceOp::max: return dispatch_type(inout, in, count, type, Max{});
    case ReduceOp::avg: break;
  }
  HPCTRAIN_FAIL("reduce_into: unreachable op");
}

void divide_by(void* buf, std::size_t count, DataType type, int ranks) {
  auto scale = [&](auto* p) {
    for (std::size_t i = 0; i < count; ++i) p[i] /= ranks;
  };
  auto scale_half = [&](auto* p, auto round) {
    for (std::size_t i = 0; i < count; ++i) p[i] = round(to_float(p[i]) / static_cast<float>(ranks));
  };
  switch (type) {
    case DataType::f32: return scale(static_cast<float*>(buf));
    case DataType::f64: return scale(static_cast<double*>(buf));
    case DataType::i32: return scale(static_cast<std::int32_t*>(buf));
    case DataType::i64: return scale(static_cast<std::int64_t*>(buf));
    case DataType::f16: return scale_half(static_cast<f16*>(buf), [](float f) { return to_f16(f); });
    case DataType::bf16: return scale_half(static_cast<bf16*>(buf), [](float f) { return to_bf16(f); });
  }
}

}  // namespace hpctrain::coll::detail
