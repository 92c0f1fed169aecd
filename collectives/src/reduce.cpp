#include "reduce.hpp"

#include "hpctrain/collectives/reduce.hpp"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "hpctrain/base/error.hpp"

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

// Plain types. The loop is blocked into fixed-length inner loops because GCC's -O2 (its
// "very cheap" vectoriser cost model) vectorises only loops whose trip count is a known
// multiple of the vector width: the plain loop stayed scalar (addss) and the reduction cost as
// much as the transfer in a large ring all-reduce. 16 elements are whole vectors at every SIMD
// width up to 512 bits; the tail is scalar.
constexpr std::size_t kBlock = 16;

template <class T, class Op>
void combine(T* __restrict inout, const T* __restrict in, std::size_t n, Op op) {
  std::size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    for (std::size_t j = 0; j < kBlock; ++j) inout[i + j] = op(inout[i + j], in[i + j]);
  }
  for (; i < n; ++i) inout[i] = op(inout[i], in[i]);
}

// Out of place: out[i] = a[i] op b[i], no buffer shared.
template <class T, class Op>
void combine_to(T* __restrict out, const T* __restrict a, const T* __restrict b, std::size_t n, Op op) {
  std::size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    for (std::size_t j = 0; j < kBlock; ++j) out[i + j] = op(a[i + j], b[i + j]);
  }
  for (; i < n; ++i) out[i] = op(a[i], b[i]);
}

// 16-bit float types: widen to float, combine, round once.
template <class Half, class Op>
void combine_half_to(Half* out, const Half* a, const Half* b, std::size_t n, Op op) {
  for (std::size_t i = 0; i < n; ++i) {
    const float r = op(to_float(a[i]), to_float(b[i]));
    if constexpr (std::is_same_v<Half, f16>) out[i] = to_f16(r);
    else out[i] = to_bf16(r);
  }
}

template <class T, class Op>
void combine_any(void* out, const void* a, const void* b, std::size_t n, Op op) {
  auto* o = static_cast<T*>(out);
  const auto* x = static_cast<const T*>(a);
  const auto* y = static_cast<const T*>(b);
  if constexpr (std::is_same_v<T, bf16> && std::is_same_v<Op, Sum>) {
    sum_bf16(o, x, y, n);  // the same arithmetic, vectorised
  } else if constexpr (std::is_same_v<T, f16> || std::is_same_v<T, bf16>) {
    combine_half_to(o, x, y, n, op);  // element by element: out == a is fine
  } else if (out == a) {
    combine(o, y, n, op);
  } else {
    combine_to(o, x, y, n, op);
  }
}

template <class Op>
void dispatch_type(void* out, const void* a, const void* b, std::size_t n, DataType type, Op op) {
  switch (type) {
    case DataType::f32: return combine_any<float>(out, a, b, n, op);
    case DataType::f64: return combine_any<double>(out, a, b, n, op);
    case DataType::i32: return combine_any<std::int32_t>(out, a, b, n, op);
    case DataType::i64: return combine_any<std::int64_t>(out, a, b, n, op);
    case DataType::f16: return combine_any<f16>(out, a, b, n, op);
    case DataType::bf16: return combine_any<bf16>(out, a, b, n, op);
  }
}

}  // namespace

void reduce_to(void* out, const void* a, const void* b, std::size_t count, DataType type, ReduceOp op) {
  if (count == 0) return;
  switch (combine_op(op)) {
    case ReduceOp::sum: return dispatch_type(out, a, b, count, type, Sum{});
    case ReduceOp::prod: return dispatch_type(out, a, b, count, type, Prod{});
    case ReduceOp::min: return dispatch_type(out, a, b, count, type, Min{});
    case ReduceOp::max: return dispatch_type(out, a, b, count, type, Max{});
    case ReduceOp::avg: break;
  }
  HPCTRAIN_FAIL("reduce_to: unreachable op");
}

void reduce_into(void* inout, const void* in, std::size_t count, DataType type, ReduceOp op) {
  reduce_to(inout, inout, in, count, type, op);
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

namespace hpctrain::coll {

void reduce_into(void* inout, const void* in, std::size_t count, DataType type, ReduceOp op) {
  detail::reduce_into(inout, in, count, type, detail::combine_op(op));
}

}  // namespace hpctrain::coll
