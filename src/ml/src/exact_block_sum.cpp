#include "hpctrain/ml/exact_block_sum.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>

#include "hpctrain/base/vector_clones.hpp"
#include "hpctrain/collectives/reproducible_sum.hpp"

namespace hpctrain::ml {

namespace {

/// Element-wise the largest magnitude over the n_terms terms (width doubles each), as
/// ReproducibleSum::observe sees magnitudes: the largest of the bit patterns of |x|, so a NaN or
/// an Inf anywhere stays in the envelope. Observing the envelope once notes what observing every
/// term would (per element the largest magnitude, and whether one is non-finite), with one pass
/// of the sum's per-element bookkeeping instead of one per term.
HPCTRAIN_VECTOR_CLONES
void magnitude_envelope(const double* terms, std::size_t n_terms, std::size_t width, double* envelope) {
  constexpr std::uint64_t kMagnitude = ~(std::uint64_t{1} << 63);
  std::vector<std::uint64_t> largest(width, 0);
  for (std::size_t t = 0; t < n_terms; ++t) {
    const double* term = terms + t * width;
    for (std::size_t i = 0; i < width; ++i) {
      std::uint64_t bits;
      std::memcpy(&bits, term + i, sizeof bits);
      largest[i] = std::max(largest[i], bits & kMagnitude);
    }
  }
  std::memcpy(envelope, largest.data(), width * sizeof(double));
}

}  // namespace

std::vector<double> exact_sum_over_samples(coll::Communicator& comm, const SamplePartition& part,
                                           std::size_t width, const BlockTerm& block_term) {
  const auto local_blocks = static_cast<std::size_t>(part.block_count);
  std::vector<double> terms(local_blocks * width, 0.0);
  for (std::size_t b = 0; b < local_blocks; ++b) {
    const auto lb = static_cast<std::int64_t>(b);
    block_term(part.block_begin(lb), part.block_length(lb), terms.data() + b * width);
  }
  // One scale per element: a centroid's coordinate and a cross product of two features have
  // unrelated magnitudes, and each keeps its own 63 - 2 lg B bits.
  std::vector<std::size_t> ends(width);
  std::iota(ends.begin(), ends.end(), std::size_t{1});
  coll::ReproducibleSum<double> sum(width, std::move(ends), std::max<std::int64_t>(1, part.total_blocks));
  std::vector<double> envelope(width);
  magnitude_envelope(terms.data(), local_blocks, width, envelope.data());
  sum.observe(envelope.data());
  sum.agree_scales(comm);
  std::vector<const double*> term_of_block(local_blocks);
  for (std::size_t b = 0; b < local_blocks; ++b) term_of_block[b] = terms.data() + b * width;
  sum.add_terms(term_of_block.data(), local_blocks);  // the bits of add() on each, one walk over the elements
  std::vector<double> out(width, 0.0);
  sum.finish(comm, out.data());
  return out;
}

}  // namespace hpctrain::ml
