#pragma once
/// @file
/// Reproducible (bitwise P-independent) summation across terms and ranks, by exact fixed point.
///
/// Floating-point addition is not associative, so an ordinary all-reduce gives bits that depend
/// on the rank count, the algorithm and the split of the work. ReproducibleSum makes the sum
/// exact instead:
///
///   1. every term (a vector of `count` values, e.g. one micro-shard's gradient) is scanned for
///      its largest magnitude per *block* (a range of elements sharing one scale);
///   2. one all-reduce(max) of the block exponents E_b (max |x| < 2^E_b over all terms of all
///      ranks) fixes per block the scale 2^s_b with s_b = 62 - E_b - ceil(lg K), K = the total
///      number of terms over all ranks;
///   3. every term is converted to int64, q = round(x * 2^s_b) (round half away from zero,
///      computed exactly: in double, or for float terms with 2^s_b a normal float in float,
///      which gives the same integers), and added into an int64 accumulator: |q| <= 2^(62 -
///      ceil lg K), so no partial sum over any subset of the K terms can overflow;
///   4. one int64 all-reduce(sum) through any Algorithm, exact and therefore the same bits for
///      every algorithm, transport, rank count and term order;
///   5. one conversion back: double(sum) * 2^-s_b, rounded to T.
///
/// The result depends only on the multiset of terms and the block layout, never on how the
/// terms were spread over ranks or in which order they were added.
///
/// **Error bound** (per element, block b, exact sum S = sum of the K terms):
///   |result - S| <= K * 2^(-s_b - 1) * (1 + 2^-20)  +  (u_T + 2^-52) * |S|
/// The first term is the fixed-point rounding of each term (at most half a unit 2^-s_b each),
/// the second the final int64 -> double -> T conversion (u_T = 2^-24 for float, 2^-53 for
/// double; the slack factors cover the conversions rounding the first term too). Results in
/// T's subnormal range add T's smallest subnormal. Relative to the block's largest term (< 2^E_b) the first term is
/// K * 2^(ceil(lg K) - 63) <= 2^(2 ceil(lg K) - 63): for K = 16, 2^-55 of the largest term, far
/// below a float ulp. error_bound() evaluates it.
///
/// Non-finite input: if any term holds Inf or NaN anywhere in a block, every element of that
/// block of the result is NaN (on every rank, whatever the rank count).
///
/// Use (one instance per reduction, every rank calls the collective steps in the same order):
/// ```
///   ReproducibleSum<float> sum(n, {n_w, n}, /*total_terms=*/K);   // two scale blocks
///   for (auto* g : my_terms) sum.observe(g);
///   sum.agree_scales(comm);
///   for (auto* g : my_terms) sum.add(g);
///   sum.finish(comm, out);
/// ```
/// Cost: two passes over the local terms (γ; observe_copy fuses the first with a copy, add_terms
/// touches the accumulator once for all terms), one all-reduce of #blocks+1 int64 (α), one int64
/// all-reduce of `count` elements (twice the bytes of a float all-reduce).

#include <cstddef>
#include <cstdint>
#include <vector>

#include "hpctrain/collectives/types.hpp"

namespace hpctrain::coll {

class Communicator;

/// Default elements per scale block for Communicator::allreduce_reproducible: one scale per
/// 4096 elements keeps small elements accurate next to large ones elsewhere in the buffer,
/// while the exponent all-reduce stays 1/4096 of the data.
inline constexpr std::size_t kReproducibleBlockElements = 4096;

/// Exact fixed-point sum of `T` vectors over terms and ranks (T = float or double).
/// Non-copyable (holds the accumulator); movable.
template <class T>
class ReproducibleSum {
 public:
  /// `count` elements; `block_ends` ascending, last == count (empty = one block); `total_terms`
  /// is K, the number of terms over all ranks (>= 1; the same on every rank).
  ReproducibleSum(std::size_t count, std::vector<std::size_t> block_ends, std::int64_t total_terms);
  /// Blocks of `block_elements` elements each (the last may be shorter).
  static ReproducibleSum with_uniform_blocks(std::size_t count, std::size_t block_elements,
                                             std::int64_t total_terms);

  ReproducibleSum(const ReproducibleSum&) = delete;
  ReproducibleSum& operator=(const ReproducibleSum&) = delete;
  ReproducibleSum(ReproducibleSum&&) noexcept = default;
  ReproducibleSum& operator=(ReproducibleSum&&) noexcept = default;

  /// Phase 1: notes the magnitudes of one local term (`count` values).
  void observe(const T* term);
  /// Phase 1 and a copy in one pass: copy[i] = term[i] for all `count` elements, and notes
  /// the term's magnitudes as observe(term) does (saves re-reading a term that must be kept).
  void observe_copy(const T* term, T* copy);
  /// Phase 1, one block only (for terms produced block by block).
  void observe_block(std::size_t block, const T* values);
  /// Collective: all-reduce(max) of the block exponents; fixes the scales. Then add().
  void agree_scales(Communicator& comm);
  /// Phase 2: adds one local term exactly (every observed term must be added, and only those).
  void add(const T* term);
  /// Phase 2 for `n_terms` terms at once, the same bits as add() on each (integer addition is
  /// exact): walks the elements in cache-sized chunks and adds every term's chunk while the
  /// accumulator's chunk stays in L1, so the accumulator is read and written once, not once per term.
  void add_terms(const T* const* terms, std::size_t n_terms);
  /// Collective: exact int64 all-reduce(sum) through `algo`, then out[i] = the sum as T.
  /// `out` may alias a term. The instance can be reused after reset().
  void finish(Communicator& comm, T* out, Algorithm algo = Algorithm::automatic);
  /// Clears magnitudes, scales and the accumulator (same layout and K).
  void reset();

  std::size_t count() const noexcept { return count_; }
  std::int64_t total_terms() const noexcept { return total_terms_; }
  std::size_t blocks() const noexcept { return block_ends_.size(); }
  const std::vector<std::size_t>& block_ends() const noexcept { return block_ends_; }
  /// s_b after agree_scales (the fixed-point unit of block b is 2^-s_b).
  int scale_exponent(std::size_t block) const;
  /// Whether block b held a non-finite value on some rank (after agree_scales).
  bool block_nonfinite(std::size_t block) const;
  /// The bound of the file comment for an element of block b whose exact sum is `exact_sum`.
  double error_bound(std::size_t block, double exact_sum) const;

 private:
  std::size_t count_;
  std::vector<std::size_t> block_ends_;
  std::int64_t total_terms_;
  int headroom_bits_;
  std::vector<std::int64_t> exponent_;  ///< per block: E_b (kEmpty if all zero); then flags
  std::vector<int> scale_;              ///< per block: s_b
  std::vector<std::int64_t> acc_;
  bool acc_zero_pending_ = true;  ///< acc_ holds stale values: the first add writes instead of adding
  bool agreed_ = false;
};

extern template class ReproducibleSum<float>;
extern template class ReproducibleSum<double>;

}  // namespace hpctrain::coll
