#pragma once
// Shared by the TreeSum tests: terms of random data with mixed magnitudes and cancellation, the
// serial reference (the fixed tree evaluated recursively, by one thread, from its definition in
// tree_sum.hpp), a float64 reference, and the ways of splitting K terms over P ranks.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/collectives/tree_sum.hpp"

namespace hpctrain::coll::testing {

/// Term k of `count` floats, the same on every rank and platform (mt19937_64 is fully specified):
/// element i has magnitude ~2^(i % 30 - 15), with random signs.
inline std::vector<float> tree_term(std::int64_t k, std::size_t count) {
  std::mt19937_64 rng(0x7ee50000u + static_cast<unsigned>(k));
  std::vector<float> t(count);
  for (std::size_t i = 0; i < count; ++i) {
    const double u = static_cast<double>(rng() >> 11) * 0x1p-53;
    const double sign = (rng() & 1) ? 1.0 : -1.0;
    t[i] = static_cast<float>(sign * (0.5 + u) * std::ldexp(1.0, static_cast<int>(i % 30) - 15));
  }
  return t;
}

/// Node (level, index) of the tree over `terms`, by its definition: a leaf is its term; an
/// inner node is left + right, or its left child alone where the right one holds no term.
inline std::vector<float> tree_node(const std::vector<std::vector<float>>& terms, int level, std::int64_t index) {
  const auto total = static_cast<std::int64_t>(terms.size());
  if (level == 0) return terms[static_cast<std::size_t>(index)];
  std::vector<float> left = tree_node(terms, level - 1, 2 * index);
  const std::int64_t right_first = (2 * index + 1) << (level - 1);
  if (right_first >= total) return left;
  const std::vector<float> right = tree_node(terms, level - 1, 2 * index + 1);
  for (std::size_t i = 0; i < left.size(); ++i) left[i] = left[i] + right[i];
  return left;
}

/// The whole sum of `terms` over the fixed tree, serially.
inline std::vector<float> serial_tree_sum(const std::vector<std::vector<float>>& terms) {
  int root = 0;
  while ((std::int64_t{1} << root) < static_cast<std::int64_t>(terms.size())) ++root;
  return tree_node(terms, root, 0);
}

inline bool same_float_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

/// How the K terms are split over P ranks.
enum class Split {
  contiguous,   ///< rank r holds balanced block r (some ranks empty where K < P)
  round_robin,  ///< chunks of 3 terms dealt to the ranks in turn: several ranges per rank
  skewed,       ///< rank 0 holds one term, the last rank the rest, the others none
};

inline std::vector<std::vector<TermRange>> split_terms(std::int64_t total, int ranks, Split split) {
  std::vector<std::vector<TermRange>> out(static_cast<std::size_t>(ranks));
  switch (split) {
    case Split::contiguous:
      for (int r = 0; r < ranks; ++r) {
        const BlockRange b = balanced_block(static_cast<std::size_t>(total), ranks, r);
        const auto first = static_cast<std::int64_t>(b.offset);
        out[static_cast<std::size_t>(r)].push_back(TermRange{first, first + static_cast<std::int64_t>(b.count)});
      }
      break;
    case Split::round_robin:
      for (std::int64_t t = 0, r = 0; t < total; t += 3, r = (r + 1) % ranks)
        out[static_cast<std::size_t>(r)].push_back(TermRange{t, std::min(total, t + 3)});
      break;
    case Split::skewed:
      out[0].push_back(TermRange{0, 1});
      if (total > 1) out[static_cast<std::size_t>(ranks - 1)].push_back(TermRange{1, total});
      break;
  }
  return out;
}

/// This rank's part of a TreeSum of the terms tree_term(0..total-1, count) split by `ranges`;
/// `lend` lends every term (the result then lands in a lent buffer where one is held).
inline std::vector<float> tree_sum_on(Communicator& comm, TreeSum& sum, std::int64_t total,
                                      const std::vector<std::vector<TermRange>>& ranges, bool lend) {
  const std::size_t count = sum.count();
  sum.begin(total, ranges, comm.rank());
  std::vector<std::vector<float>> mine;
  for (const TermRange& r : ranges[static_cast<std::size_t>(comm.rank())])
    for (std::int64_t t = r.begin; t < r.end; ++t) mine.push_back(tree_term(t, count));
  std::size_t k = 0;
  for (const TermRange& r : ranges[static_cast<std::size_t>(comm.rank())]) {
    for (std::int64_t t = r.begin; t < r.end; ++t) {
      std::vector<float>& term = mine[k++];
      sum.add(t, term.data(), lend);
      if (!lend) std::fill(term.begin(), term.end(), -1.0f);  // not lent: TreeSum must not read it again
    }
  }
  std::vector<float> result(count);
  sum.finish(comm, result.data());
  return result;
}

}  // namespace hpctrain::coll::testing
