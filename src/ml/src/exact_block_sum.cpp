#include "hpctrain/ml/exact_block_sum.hpp"

#include <algorithm>
#include <numeric>

#include "hpctrain/collectives/reproducible_sum.hpp"

namespace hpctrain::ml {

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
  for (std::size_t b = 0; b < local_blocks; ++b) sum.observe(terms.data() + b * width);
  sum.agree_scales(comm);
  for (std::size_t b = 0; b < local_blocks; ++b) sum.add(terms.data() + b * width);
  std::vector<double> out(width, 0.0);
  sum.finish(comm, out.data());
  return out;
}

}  // namespace hpctrain::ml
