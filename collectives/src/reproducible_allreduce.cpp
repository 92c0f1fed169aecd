// Reproducible all-reduce: exact fixed-point summation (see reproducible_sum.hpp for the
// scheme and its error bound).
//
// Schedule: (1) each rank scans its local terms for the largest magnitude per scale block;
// (2) all-reduce(max) of #blocks + #blocks int64 (exponents and non-finite flags); (3) each
// local term is rounded to int64 at the agreed scale and added into one int64 accumulator;
// (4) all-reduce(sum) of `count` int64 through the requested Algorithm; (5) one conversion back.
// Cost for n elements, t local terms, B blocks, any all-reduce algorithm A:
//   2 t n γ (scan + convert/add)  +  T_A(8B bytes)  +  T_A(8n bytes)  +  n γ (convert back),
// where the scan may carry a copy of the term (observe_copy) and the convert/add of all t terms
// runs chunk by chunk (add_terms), so the 8n-byte accumulator is written once per step, not
// zeroed and then read and written t times;
// i.e. the data all-reduce moves twice the bytes of a float all-reduce (int64 vs float32) and
// the same as a double one. Integer addition is associative, so every algorithm, transport and
// rank count gives the same bits.

#include "hpctrain/base/vector_clones.hpp"
#include "hpctrain/collectives/reproducible_sum.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>

#include "hpctrain/base/error.hpp"
#include "hpctrain/collectives/communicator.hpp"

namespace hpctrain::coll {

namespace {

#if defined(__GNUC__)
#define HPCTRAIN_ALWAYS_INLINE_EARLY __attribute__((always_inline))
#else
#define HPCTRAIN_ALWAYS_INLINE_EARLY
#endif

/// Marks a block whose terms were all zero (any real exponent is larger).
constexpr std::int64_t kEmpty = std::numeric_limits<std::int32_t>::min();
/// The accumulator keeps |sum| <= 2^62: one bit below int64's limit.
constexpr int kAccumulatorBits = 62;

int ceil_log2(std::int64_t k) {
  int h = 0;
  while ((std::int64_t{1} << h) < k) ++h;
  return h;
}

/// 2^e as a double for |e| up to ~2000: split so that no factor over- or underflows.
struct PowerOfTwo {
  double first = 1.0, second = 1.0;
  explicit PowerOfTwo(int e) {
    if (e > 1000) {
      first = std::ldexp(1.0, 1000);
      second = std::ldexp(1.0, e - 1000);
    } else if (e < -1000) {
      first = std::ldexp(1.0, -1000);
      second = std::ldexp(1.0, e + 1000);
    } else {
      first = std::ldexp(1.0, e);
    }
  }
  bool split() const noexcept { return second != 1.0; }
};

/// round(y) half away from zero, for |y| < 2^63; exact: for |y| >= 2^52 y is an integer and
/// the truncation is exact; below, y - trunc(y) is exact (same sign, difference < 1).
HPCTRAIN_ALWAYS_INLINE_EARLY inline std::int64_t round_half_away(double y) noexcept {
  const auto t = static_cast<std::int64_t>(y);
  const double f = y - static_cast<double>(t);
  return t + static_cast<std::int64_t>(f >= 0.5) - static_cast<std::int64_t>(f <= -0.5);
}

// The two hot loops, cloned for AVX-512 (vcvttpd2qq / vcvtqq2pd convert 8 doubles to int64
// and back per instruction; without AVX-512DQ each element is a scalar conversion), AVX2 and the
// baseline (vector_clones.hpp).

/// acc[i] += round(term[i] * 2^s) (acc[i] = ... when Assign: the first term of a step, so the
/// accumulator needs no zeroing pass), the scale given as one or two factors (first, second).
template <bool Assign, class T>
HPCTRAIN_ALWAYS_INLINE inline void add_scaled_impl(const T* term, std::int64_t* acc, std::size_t n, double first,
                            double second, bool second_first) {
  if (second == 1.0) {
    for (std::size_t i = 0; i < n; ++i) {
      const std::int64_t q = round_half_away(static_cast<double>(term[i]) * first);
      if constexpr (Assign) acc[i] = q; else acc[i] += q;
    }
  } else if (second_first) {
    for (std::size_t i = 0; i < n; ++i) {
      const std::int64_t q = round_half_away((static_cast<double>(term[i]) * second) * first);
      if constexpr (Assign) acc[i] = q; else acc[i] += q;
    }
  } else {
    for (std::size_t i = 0; i < n; ++i) {
      const std::int64_t q = round_half_away((static_cast<double>(term[i]) * first) * second);
      if constexpr (Assign) acc[i] = q; else acc[i] += q;
    }
  }
}
/// The float path of add_scaled, where 2^s is a normal float: y = x * 2^s is then exact in
/// float as in double (|y| <= 2^62; a product that lands below float's normal range is below
/// 1/2 and rounds to 0 either way), and round(y) half away from zero is computed in float:
///   |y| < 1/2: trunc(y) = 0;   |y| >= 2^23: y (already an integer);
///   otherwise trunc(y + copysign(1/2, y)), which is exact where it matters: for |y| in
///   [1, 2^23) the sum stays in y's binade (where 1/2 is a multiple of the ulp) or lands in
///   [2^k, 2^k + 1/2] past it, and for |y| in [1/2, 1) it lies in [1, 3/2]; truncation then
///   gives round(y) in every case. (Below 1/2 the sum may round up to 1, hence the first case.)
/// 16 float lanes, no widening to double; the same integers as the double path (tested).
template <bool Assign>
HPCTRAIN_ALWAYS_INLINE inline void add_scaled_float_impl(const float* term, std::int64_t* acc, std::size_t n,
                                                         float scale) {
  for (std::size_t i = 0; i < n; ++i) {
    const float y = term[i] * scale;
    const float a = std::fabs(y);
    const float half = a >= 0.5f && a < 0x1p23f ? std::copysign(0.5f, y) : 0.0f;
    const auto q = static_cast<std::int64_t>(y + half);  // truncates
    if constexpr (Assign) acc[i] = q; else acc[i] += q;
  }
}
HPCTRAIN_VECTOR_CLONES void add_scaled_float(const float* t, std::int64_t* acc, std::size_t n, float scale) {
  add_scaled_float_impl<false>(t, acc, n, scale);
}
HPCTRAIN_VECTOR_CLONES void set_scaled_float(const float* t, std::int64_t* acc, std::size_t n, float scale) {
  add_scaled_float_impl<true>(t, acc, n, scale);
}
/// Whether 2^s is a normal float (the float path applies).
constexpr bool float_scale(int s) { return s >= -126 && s <= 127; }

HPCTRAIN_VECTOR_CLONES void add_scaled(const float* t, std::int64_t* acc, std::size_t n, double f1, double f2, bool o) {
  add_scaled_impl<false>(t, acc, n, f1, f2, o);
}
HPCTRAIN_VECTOR_CLONES void add_scaled(const double* t, std::int64_t* acc, std::size_t n, double f1, double f2, bool o) {
  add_scaled_impl<false>(t, acc, n, f1, f2, o);
}
HPCTRAIN_VECTOR_CLONES void set_scaled(const float* t, std::int64_t* acc, std::size_t n, double f1, double f2, bool o) {
  add_scaled_impl<true>(t, acc, n, f1, f2, o);
}
HPCTRAIN_VECTOR_CLONES void set_scaled(const double* t, std::int64_t* acc, std::size_t n, double f1, double f2, bool o) {
  add_scaled_impl<true>(t, acc, n, f1, f2, o);
}

/// out[i] = T(double(acc[i]) * unit): the conversion back for a scale that is one factor.
template <class T>
HPCTRAIN_ALWAYS_INLINE inline void unscale_impl(const std::int64_t* acc, T* out, std::size_t n, double unit) {
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<T>(static_cast<double>(acc[i]) * unit);
}
HPCTRAIN_VECTOR_CLONES void unscale(const std::int64_t* acc, float* out, std::size_t n, double unit) {
  unscale_impl(acc, out, n, unit);
}
HPCTRAIN_VECTOR_CLONES void unscale(const std::int64_t* acc, double* out, std::size_t n, double unit) {
  unscale_impl(acc, out, n, unit);
}

/// The largest |v[i]| as its bit pattern: for non-negative IEEE values the integer order of
/// the bits is their numeric order, so the scan is an integer max (vectorises; a float max
/// reduction does not, for NaN's sake). Inf and NaN have all exponent bits set: a result at
/// or above `Bits(exponent mask)` means a non-finite term.
/// With Copy, also copy[i] = v[i] in the same pass.
template <bool Copy, class T, class Bits>
HPCTRAIN_ALWAYS_INLINE inline Bits max_magnitude_bits_impl(const T* v, T* copy, std::size_t n) {
  constexpr Bits kMagnitude = static_cast<Bits>(~(Bits{1} << (sizeof(Bits) * 8 - 1)));
  Bits largest = 0;
  for (std::size_t i = 0; i < n; ++i) {
    Bits b;
    std::memcpy(&b, v + i, sizeof b);
    if constexpr (Copy) std::memcpy(copy + i, &b, sizeof b);
    b &= kMagnitude;
    largest = b > largest ? b : largest;
  }
  return largest;
}
HPCTRAIN_VECTOR_CLONES std::uint32_t max_magnitude_bits(const float* v, std::size_t n) {
  return max_magnitude_bits_impl<false, float, std::uint32_t>(v, nullptr, n);
}
HPCTRAIN_VECTOR_CLONES std::uint64_t max_magnitude_bits(const double* v, std::size_t n) {
  return max_magnitude_bits_impl<false, double, std::uint64_t>(v, nullptr, n);
}
HPCTRAIN_VECTOR_CLONES std::uint32_t max_magnitude_bits_copy(const float* v, float* copy, std::size_t n) {
  return max_magnitude_bits_impl<true, float, std::uint32_t>(v, copy, n);
}
HPCTRAIN_VECTOR_CLONES std::uint64_t max_magnitude_bits_copy(const double* v, double* copy, std::size_t n) {
  return max_magnitude_bits_impl<true, double, std::uint64_t>(v, copy, n);
}

/// Elements per chunk of add_terms: 2048 int64 (16 KiB) of accumulator plus a float or double
/// chunk of the term stay in a 48 KiB L1 across the terms.
constexpr std::size_t kAddChunk = 2048;

template <class T>
constexpr double unit_roundoff() {
  return std::ldexp(1.0, -std::numeric_limits<T>::digits);
}

/// Records one term's largest magnitude (as bits, from max_magnitude_bits) of block `block`
/// into `exponent` (E_b per block, then the non-finite flags; `blocks` entries each).
template <class Bits>
void note_largest(std::vector<std::int64_t>& exponent, std::size_t blocks, std::size_t block, Bits largest_bits) {
  using T = std::conditional_t<sizeof(Bits) == 4, float, double>;
  static_assert(std::numeric_limits<T>::is_iec559, "IEEE 754 types only");
  const T infinity = std::numeric_limits<T>::infinity();
  Bits infinity_bits;
  std::memcpy(&infinity_bits, &infinity, sizeof infinity_bits);
  const bool bad = largest_bits >= infinity_bits;  // Inf or NaN
  T largest;
  std::memcpy(&largest, &largest_bits, sizeof largest);
  if (bad) exponent[blocks + block] = 1;
  if (largest > 0 && !bad) {
    int e = 0;
    std::frexp(largest, &e);  // largest = f * 2^e, f in [0.5, 1): largest < 2^e
    exponent[block] = std::max<std::int64_t>(exponent[block], e);
  }
}

}  // namespace

template <class T>
ReproducibleSum<T>::ReproducibleSum(std::size_t count, std::vector<std::size_t> block_ends,
                                    std::int64_t total_terms)
    : count_(count), block_ends_(std::move(block_ends)), total_terms_(total_terms) {
  HPCTRAIN_REQUIRE(total_terms >= 1, "ReproducibleSum: total_terms must be at least 1, got " +
                                         std::to_string(total_terms));
  HPCTRAIN_REQUIRE(total_terms <= (std::int64_t{1} << 40),
                   "ReproducibleSum: total_terms " + std::to_string(total_terms) +
                       " leaves too few fixed-point bits (at most 2^40 terms)");
  if (block_ends_.empty()) block_ends_.push_back(count);
  std::size_t prev = 0;
  for (std::size_t e : block_ends_) {
    HPCTRAIN_REQUIRE(e >= prev && e <= count,
                     "ReproducibleSum: block_ends must be ascending and at most count (" +
                         std::to_string(count) + "), got " + std::to_string(e));
    prev = e;
  }
  HPCTRAIN_REQUIRE(block_ends_.back() == count, "ReproducibleSum: the last block must end at count (" +
                                                    std::to_string(count) + "), got " +
                                                    std::to_string(block_ends_.back()));
  headroom_bits_ = ceil_log2(total_terms_);
  exponent_.assign(2 * block_ends_.size(), 0);
  scale_.assign(block_ends_.size(), 0);
  acc_.assign(count_, 0);
  reset();
}

template <class T>
ReproducibleSum<T> ReproducibleSum<T>::with_uniform_blocks(std::size_t count, std::size_t block_elements,
                                                           std::int64_t total_terms) {
  HPCTRAIN_REQUIRE(block_elements >= 1, "ReproducibleSum: block_elements must be at least 1");
  std::vector<std::size_t> ends;
  for (std::size_t e = block_elements; e < count; e += block_elements) ends.push_back(e);
  ends.push_back(count);
  return ReproducibleSum(count, std::move(ends), total_terms);
}

template <class T>
void ReproducibleSum<T>::reset() {
  const std::size_t b = block_ends_.size();
  std::fill(exponent_.begin(), exponent_.begin() + static_cast<std::ptrdiff_t>(b), kEmpty);
  std::fill(exponent_.begin() + static_cast<std::ptrdiff_t>(b), exponent_.end(), 0);
  acc_zero_pending_ = true;  // the first add writes the accumulator (no zeroing pass)
  agreed_ = false;
}

template <class T>
void ReproducibleSum<T>::observe_block(std::size_t block, const T* values) {
  HPCTRAIN_REQUIRE(!agreed_, "ReproducibleSum::observe after agree_scales (call reset first)");
  HPCTRAIN_REQUIRE(block < block_ends_.size(), "ReproducibleSum::observe_block: no block " + std::to_string(block));
  const std::size_t begin = block == 0 ? 0 : block_ends_[block - 1];
  note_largest(exponent_, block_ends_.size(), block, max_magnitude_bits(values, block_ends_[block] - begin));
}

template <class T>
void ReproducibleSum<T>::observe_copy(const T* term, T* copy) {
  HPCTRAIN_REQUIRE(!agreed_, "ReproducibleSum::observe after agree_scales (call reset first)");
  for (std::size_t b = 0; b < block_ends_.size(); ++b) {
    const std::size_t begin = b == 0 ? 0 : block_ends_[b - 1];
    note_largest(exponent_, block_ends_.size(), b,
                 max_magnitude_bits_copy(term + begin, copy + begin, block_ends_[b] - begin));
  }
}

template <class T>
void ReproducibleSum<T>::observe(const T* term) {
  for (std::size_t b = 0; b < block_ends_.size(); ++b) {
    observe_block(b, term + (b == 0 ? 0 : block_ends_[b - 1]));
  }
}

template <class T>
void ReproducibleSum<T>::agree_scales(Communicator& comm) {
  HPCTRAIN_REQUIRE(!agreed_, "ReproducibleSum::agree_scales called twice (call reset first)");
  comm.allreduce(exponent_.data(), exponent_.size(), ReduceOp::max, Algorithm::automatic);
  for (std::size_t b = 0; b < block_ends_.size(); ++b) {
    // An all-zero block gets any scale; 0 keeps the arithmetic trivially in range.
    scale_[b] = exponent_[b] == kEmpty ? 0
                                       : kAccumulatorBits - static_cast<int>(exponent_[b]) - headroom_bits_;
  }
  agreed_ = true;
}

template <class T>
void ReproducibleSum<T>::add(const T* term) {
  add_terms(&term, 1);
}

template <class T>
void ReproducibleSum<T>::add_terms(const T* const* terms, std::size_t n_terms) {
  HPCTRAIN_REQUIRE(agreed_, "ReproducibleSum::add before agree_scales");
  if (n_terms == 0) return;
  const std::size_t nb = block_ends_.size();
  const bool assign = acc_zero_pending_;
  for (std::size_t b = 0; b < nb; ++b) {
    const std::size_t begin = b == 0 ? 0 : block_ends_[b - 1];
    const std::size_t end = block_ends_[b];
    if (exponent_[nb + b] != 0 || exponent_[b] == kEmpty) {  // NaN block / all zero: finish() fills it
      if (assign) std::fill(acc_.begin() + static_cast<std::ptrdiff_t>(begin), acc_.begin() + static_cast<std::ptrdiff_t>(end), 0);
      continue;
    }
    const PowerOfTwo scale(scale_[b]);
    // Both factors > 1 or both < 1, in the order that keeps the intermediate in range; the
    // result |x| * 2^s <= 2^62 is exact either way (products by powers of two).
    const bool second_first = scale_[b] > 0;
    for (std::size_t c = begin; c < end; c += kAddChunk) {
      const std::size_t n = std::min(kAddChunk, end - c);
      std::size_t t = 0;
      if constexpr (std::is_same_v<T, float>) {
        if (float_scale(scale_[b])) {
          const float f = std::ldexp(1.0f, scale_[b]);
          if (assign) set_scaled_float(terms[t++] + c, acc_.data() + c, n, f);
          for (; t < n_terms; ++t) add_scaled_float(terms[t] + c, acc_.data() + c, n, f);
          continue;
        }
      }
      if (assign) set_scaled(terms[t++] + c, acc_.data() + c, n, scale.first, scale.second, second_first);
      for (; t < n_terms; ++t) add_scaled(terms[t] + c, acc_.data() + c, n, scale.first, scale.second, second_first);
    }
  }
  acc_zero_pending_ = false;
}

template <class T>
void ReproducibleSum<T>::finish(Communicator& comm, T* out, Algorithm algo) {
  HPCTRAIN_REQUIRE(agreed_, "ReproducibleSum::finish before agree_scales");
  HPCTRAIN_REQUIRE(out != nullptr || count_ == 0, "ReproducibleSum::finish: null output");
  if (acc_zero_pending_) {  // no local term (a rank without micro-shards): contributes zero
    std::fill(acc_.begin(), acc_.end(), 0);
    acc_zero_pending_ = false;
  }
  comm.allreduce(acc_.data(), acc_.size(), ReduceOp::sum, algo);
  const std::size_t nb = block_ends_.size();
  for (std::size_t b = 0; b < nb; ++b) {
    const std::size_t begin = b == 0 ? 0 : block_ends_[b - 1];
    const std::size_t end = block_ends_[b];
    if (exponent_[nb + b] != 0) {
      std::fill(out + begin, out + end, std::numeric_limits<T>::quiet_NaN());
      continue;
    }
    if (exponent_[b] == kEmpty) {
      std::fill(out + begin, out + end, T(0));
      continue;
    }
    const PowerOfTwo unit(-scale_[b]);
    if (!unit.split()) {
      unscale(acc_.data() + begin, out + begin, end - begin, unit.first);
    } else {
      for (std::size_t i = begin; i < end; ++i) out[i] = static_cast<T>(std::ldexp(static_cast<double>(acc_[i]), -scale_[b]));
    }
  }
}

template <class T>
int ReproducibleSum<T>::scale_exponent(std::size_t block) const {
  HPCTRAIN_REQUIRE(agreed_ && block < scale_.size(), "ReproducibleSum::scale_exponent: no agreed block " +
                                                          std::to_string(block));
  return scale_[block];
}

template <class T>
bool ReproducibleSum<T>::block_nonfinite(std::size_t block) const {
  HPCTRAIN_REQUIRE(agreed_ && block < scale_.size(), "ReproducibleSum::block_nonfinite: no agreed block " +
                                                          std::to_string(block));
  return exponent_[block_ends_.size() + block] != 0;
}

template <class T>
double ReproducibleSum<T>::error_bound(std::size_t block, double exact_sum) const {
  const int s = scale_exponent(block);
  const double rounding = static_cast<double>(total_terms_) * std::ldexp(1.0, -s - 1) * (1.0 + std::ldexp(1.0, -20));
  return rounding + (unit_roundoff<T>() + std::ldexp(1.0, -52)) * std::fabs(exact_sum) +
         static_cast<double>(std::numeric_limits<T>::denorm_min());
}

template class ReproducibleSum<float>;
template class ReproducibleSum<double>;

namespace {
template <class T>
void reproducible(Communicator& comm, const T* send, T* recv, std::size_t count, Algorithm algo,
                  std::size_t block_elements) {
  HPCTRAIN_REQUIRE(block_elements >= 1, "allreduce_reproducible: block_elements must be at least 1");
  HPCTRAIN_REQUIRE(count == 0 || (send != nullptr && recv != nullptr),
                   "allreduce_reproducible: null buffer with count " + std::to_string(count));
  // The accumulator (8 bytes per element) is kept per thread for the next call of the same
  // layout: a fresh multi-megabyte allocation each call costs its page faults every time (on
  // this VM, 8 ms for 2 MiB, 30x the all-reduce itself).
  thread_local std::optional<ReproducibleSum<T>> cached;
  if (!cached || cached->count() != count || cached->total_terms() != comm.size() ||
      cached->block_ends().size() != (count + block_elements - 1) / block_elements + (count == 0 ? 1 : 0) ||
      (count > 0 && cached->block_ends().front() != std::min(count, block_elements))) {
    cached.reset();
    cached.emplace(ReproducibleSum<T>::with_uniform_blocks(count, block_elements, comm.size()));
  } else {
    cached->reset();
  }
  ReproducibleSum<T>& sum = *cached;
  sum.observe(send);
  sum.agree_scales(comm);
  sum.add(send);
  sum.finish(comm, recv, algo);
}
}  // namespace

void Communicator::allreduce_reproducible(const float* send, float* recv, std::size_t count,
                                          Algorithm algo, std::size_t block_elements) {
  reproducible(*this, send, recv, count, algo, block_elements);
}

void Communicator::allreduce_reproducible(const double* send, double* recv, std::size_t count,
                                          Algorithm algo, std::size_t block_elements) {
  reproducible(*this, send, recv, count, algo, block_elements);
}

}  // namespace hpctrain::coll
