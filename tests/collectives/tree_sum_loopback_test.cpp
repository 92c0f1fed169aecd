// TreeSum over loopback ranks (threads of this process), P = 1..8: the sum has the bits of the
// fixed tree evaluated serially from its definition, whatever the split of the terms over the
// ranks (contiguous, several ranges per rank, empty ranks), lent or copied, for vectors shorter
// than a rank count and longer than the merge chunk; it stays within pairwise summation's bound
// of the float64 sum; bad ranges and out-of-order terms are refused with the reason. Also the
// exchange collective it rests on (blocking and not), maximal_nodes on hand-worked cases, and
// the sum finished in segments while its last term is still being written.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "hpctrain/base/error.hpp"
#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/collectives/tree_sum.hpp"
#include "loopback_ranks.hpp"
#include "reproducible_terms.hpp"
#include "tree_sum_terms.hpp"

#include <algorithm>
#include <limits>
#include <set>

namespace hpctrain::coll {
namespace {

using namespace testing;

/// The message of the hpctrain::Error `call` throws, or "no error".
std::string error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

std::vector<std::vector<float>> all_terms(std::int64_t total, std::size_t count) {
  std::vector<std::vector<float>> terms;
  for (std::int64_t t = 0; t < total; ++t) terms.push_back(tree_term(t, count));
  return terms;
}

/// body(comm, count, total, ranges, expected) on loopback ranks, for every count, total, rank count
/// 1..5 and split: the sweep of the tests that compute terms the way DeterministicSync does.
using SplitBody = std::function<void(Communicator&, std::size_t count, std::int64_t total,
                                     const std::vector<std::vector<TermRange>>& ranges, const std::vector<float>& expected)>;
void for_each_split(const std::vector<std::size_t>& counts, const std::vector<std::int64_t>& totals,
                    const SplitBody& body) {
  for (const std::size_t count : counts) {
    for (const std::int64_t total : totals) {
      const std::vector<float> expected = serial_tree_sum(all_terms(total, count));
      for (int p = 1; p <= 5; ++p) {
        for (Split split : {Split::contiguous, Split::round_robin, Split::skewed}) {
          const auto ranges = split_terms(total, p, split);
          run_loopback_ranks(p, Tuning{}, [&](Communicator& comm) {
            const std::string where = "K=" + std::to_string(total) + " count=" + std::to_string(count) +
                                      " P=" + std::to_string(p) + " split=" + std::to_string(static_cast<int>(split)) +
                                      " rank " + std::to_string(comm.rank());
            SCOPED_TRACE(where);
            body(comm, count, total, ranges, expected);
          });
        }
      }
    }
  }
}

TEST(TreeSum, MaximalNodesOfHandWorkedRanges) {
  using V = std::vector<TreeNode>;
  EXPECT_EQ(maximal_nodes({{0, 16}}, 16), (V{{4, 0}}));
  EXPECT_EQ(maximal_nodes({{3, 9}}, 16), (V{{0, 3}, {2, 1}, {0, 8}}));
  // Five terms: term 4 has no right siblings, so it rises to (2, 1) and joins (2, 0).
  EXPECT_EQ(maximal_nodes({{0, 5}}, 5), (V{{3, 0}}));
  EXPECT_EQ(maximal_nodes({{4, 5}}, 5), (V{{2, 1}}));
  EXPECT_EQ(maximal_nodes({{0, 3}, {6, 8}}, 8), (V{{1, 0}, {0, 2}, {1, 3}}));
  EXPECT_EQ(maximal_nodes({}, 8), V{});
  EXPECT_EQ(maximal_nodes({{0, 1}}, 1), (V{{0, 0}}));
}

TEST(TreeSum, SameBitsAsTheSerialTreeAtAnyRankCount) {
  for (std::size_t count : {std::size_t{1}, std::size_t{7}, std::size_t{9001}}) {
    for (std::int64_t total : {1, 2, 3, 5, 16, 17, 33}) {
      const auto terms = all_terms(total, count);
      const std::vector<float> expected = serial_tree_sum(terms);
      for (int p = 1; p <= 8; ++p) {
        for (Split split : {Split::contiguous, Split::round_robin, Split::skewed}) {
          for (bool lend : {false, true}) {
            const auto ranges = split_terms(total, p, split);
            run_loopback_ranks(p, Tuning{}, [&](Communicator& comm) {
              TreeSum sum(count);
              const auto got = tree_sum_on(comm, sum, total, ranges, lend);
              EXPECT_TRUE(same_float_bits(got, expected))
                  << "K=" << total << " count=" << count << " P=" << p << " split=" << static_cast<int>(split)
                  << " lend=" << lend << " rank " << comm.rank();
              // A second sum with the same TreeSum (slots reused) gives the same bits.
              const auto again = tree_sum_on(comm, sum, total, ranges, !lend);
              EXPECT_TRUE(same_float_bits(again, expected)) << "reused TreeSum, K=" << total << " P=" << p;
            });
          }
        }
      }
    }
  }
}

// What DeterministicSync's grouped passes do: a rank hands over aligned nodes of its terms
// (maximal_nodes of pieces of its ranges, as micro-batches cut them), each computed as the tree
// of its terms; the sum has the bits of adding every term.
TEST(TreeSum, NodesOfTermsAddAsTheirTerms) {
  for (std::int64_t total : {1, 3, 5, 8, 17}) {
    const auto terms = all_terms(total, 33);
    const std::vector<float> expected = serial_tree_sum(terms);
    for (int p = 1; p <= 5; ++p) {
      for (Split split : {Split::contiguous, Split::round_robin, Split::skewed}) {
        for (std::int64_t piece : {1, 2, 5}) {  // a micro-batch's terms: pieces of a range
          const auto ranges = split_terms(total, p, split);
          run_loopback_ranks(p, Tuning{}, [&](Communicator& comm) {
            TreeSum sum(33);
            sum.begin(total, ranges, comm.rank());
            std::vector<std::vector<float>> held;  // lent nodes stay alive until finish()
            for (const TermRange& r : ranges[static_cast<std::size_t>(comm.rank())]) {
              for (std::int64_t first = r.begin; first < r.end; first += piece) {
                for (const TreeNode& n : maximal_nodes({{first, std::min(r.end, first + piece)}}, total)) {
                  held.push_back(tree_node(terms, n.level, n.index));
                  sum.add_node(n, held.back().data(), /*lend=*/held.size() % 2 == 0);
                }
              }
            }
            std::vector<float> result(33);
            sum.finish(comm, result.data());
            EXPECT_TRUE(same_float_bits(result, expected))
                << "K=" << total << " P=" << p << " split=" << static_cast<int>(split) << " piece=" << piece;
          });
        }
      }
    }
  }
}

TEST(TreeSum, ResultMayBeALentTerm) {
  const std::int64_t total = 6;
  const std::size_t count = 100;
  const auto expected = serial_tree_sum(all_terms(total, count));
  for (int p : {1, 2, 3}) {
    const auto ranges = split_terms(total, p, Split::contiguous);
    run_loopback_ranks(p, Tuning{}, [&](Communicator& comm) {
      TreeSum sum(count);
      sum.begin(total, ranges, comm.rank());
      std::vector<std::vector<float>> mine;
      for (const TermRange& r : ranges[static_cast<std::size_t>(comm.rank())])
        for (std::int64_t t = r.begin; t < r.end; ++t) mine.push_back(tree_term(t, count));
      std::int64_t t = ranges[static_cast<std::size_t>(comm.rank())][0].begin;
      for (auto& term : mine) sum.add(t++, term.data(), true);
      sum.finish(comm, mine.front().data());
      EXPECT_TRUE(same_float_bits(mine.front(), expected)) << "P=" << p << " rank " << comm.rank();
    });
  }
}

// What DeterministicSync does: the first term is lent from the caller's buffer (which receives
// the result), every later one is written into term_buffer() and lent. The bits are the serial
// tree's, and the storage handed out stays within workspace_floats(term_buffers = true).
TEST(TreeSum, TermsComputedInItsOwnStorage) {
  for_each_split({1, 9001}, {1, 2, 3, 5, 8, 17}, [](Communicator& comm, std::size_t count, std::int64_t total,
                                                    const std::vector<std::vector<TermRange>>& ranges,
                                                    const std::vector<float>& expected) {
    TreeSum sum(count);
    for (int round = 0; round < 2; ++round) {  // the second reuses the slots
      sum.begin(total, ranges, comm.rank());
      std::vector<float> own(count, std::numeric_limits<float>::quiet_NaN());
      std::set<const float*> handed_out;
      bool first = true;
      for (const TermRange& r : ranges[static_cast<std::size_t>(comm.rank())]) {
        for (std::int64_t t = r.begin; t < r.end; ++t) {
          float* at = own.data();
          if (!first) {
            at = sum.term_buffer();
            handed_out.insert(at);
          }
          first = false;
          const std::vector<float> term = tree_term(t, count);
          std::copy(term.begin(), term.end(), at);
          sum.add(t, at, /*lend=*/true);
        }
      }
      sum.finish(comm, own.data());
      EXPECT_TRUE(same_float_bits(own, expected)) << "round " << round;
      EXPECT_LE(handed_out.size() * count,
                TreeSum::workspace_floats(count, total, ranges, comm.rank(), /*term_buffers=*/true));
    }
  });
}

// What DeterministicSync does with host gradients: the rank's last term goes to the sum with
// add_last_node() before its backward has written it, and the sum is finished segment by
// segment (last layers first, uneven, one empty) as the elements are written; the bits are the
// serial tree's, and the elements of a segment not yet written are never read.
TEST(TreeSum, SegmentsFinishWithTheWholeSumsBits) {
  for_each_split({7, 9001}, {1, 3, 5, 8, 17}, [](Communicator& comm, std::size_t count, std::int64_t total,
                                                 const std::vector<std::vector<TermRange>>& ranges,
                                                 const std::vector<float>& expected) {
    const std::vector<BlockRange> segments = {{count - count / 4, count / 4},
                                              {count / 3 + 1, count - count / 4 - count / 3 - 1},
                                              {count / 3 + 1, 0},
                                              {0, count / 3 + 1}};
    TreeSum sum(count);
    for (int round = 0; round < 2; ++round) {  // the second reuses the slots and buffers
      sum.begin(total, ranges, comm.rank());
      std::vector<float> own(count, std::numeric_limits<float>::quiet_NaN());
      std::vector<std::int64_t> mine;
      for (const TermRange& r : ranges[static_cast<std::size_t>(comm.rank())])
        for (std::int64_t t = r.begin; t < r.end; ++t) mine.push_back(t);
      float* last = nullptr;
      std::vector<float> last_term;
      for (std::size_t i = 0; i < mine.size(); ++i) {
        float* at = i == 0 ? own.data() : sum.term_buffer();
        if (i + 1 == mine.size()) {  // unwritten (NaN) until its segment is finished
          std::fill(at, at + count, std::numeric_limits<float>::quiet_NaN());
          sum.add_last_node(TreeNode{0, mine[i]}, at);
          last = at;
          last_term = tree_term(mine[i], count);
          break;
        }
        const std::vector<float> term = tree_term(mine[i], count);
        std::copy(term.begin(), term.end(), at);
        sum.add(mine[i], at, /*lend=*/true);
      }
      for (const BlockRange& s : segments) {
        if (last != nullptr) std::copy_n(last_term.begin() + s.offset, s.count, last + s.offset);
        sum.finish_segment(comm, own.data(), s);
      }
      sum.wait_finished();
      EXPECT_TRUE(same_float_bits(own, expected)) << "round " << round;
      EXPECT_EQ(sum.segment_times().size(), comm.size() == 1 ? 0U : 3U);  // the empty segment moves nothing
    }
  });
}

TEST(TreeSum, RefusesANodeThatIsNotTheLastAndSegmentsThatDoNotTile) {
  std::vector<float> x(4, 1.0f), y(4, 2.0f), out(4);
  run_loopback_ranks(1, Tuning{}, [&](Communicator& comm) {
    TreeSum sum(4);
    sum.begin(2, {{{0, 2}}}, 0);
    EXPECT_NE(error_of([&] { sum.add_last_node(TreeNode{0, 0}, x.data()); }).find("it is not the last"),
              std::string::npos);
    sum.begin(2, {{{0, 2}}}, 0);
    sum.add(0, x.data(), /*lend=*/true);
    EXPECT_NE(error_of([&] { sum.finish_segment(comm, out.data(), BlockRange{0, 4}); }).find("added 1 of its 2 terms"),
              std::string::npos);
    sum.add_last_node(TreeNode{0, 1}, y.data());
    sum.finish_segment(comm, out.data(), BlockRange{1, 2});
    EXPECT_NE(error_of([&] { sum.finish_segment(comm, out.data(), BlockRange{2, 2}); }).find("already finished"),
              std::string::npos);
    EXPECT_NE(error_of([&] { sum.finish_segment(comm, out.data(), BlockRange{3, 2}); }).find("outside the 4"),
              std::string::npos);
    EXPECT_NE(error_of([&] { sum.wait_finished(); }).find("cover 2 of the 4 elements"), std::string::npos);
    EXPECT_EQ(out[1], 3.0f);
    EXPECT_EQ(out[2], 3.0f);
  });
}

TEST(TreeSum, TermBufferAfterTheLastTermIsRefused) {
  run_loopback_ranks(1, Tuning{}, [&](Communicator& comm) {
    TreeSum sum(4);
    sum.begin(1, {{{0, 1}}}, comm.rank());
    std::vector<float> term(4, 1.0f);
    sum.add(0, term.data(), true);
    EXPECT_NE(error_of([&] { sum.term_buffer(); }).find("has added all its 1 terms"), std::string::npos);
  });
}

TEST(TreeSum, WithinPairwiseBoundOfFloat64) {
  const std::size_t count = 3000;
  for (std::int64_t total : {2, 7, 64, 100}) {
    const auto terms = all_terms(total, count);
    const auto got = serial_tree_sum(terms);
    // The TreeSum at P = 3 must give these bits (checked above); here the bound itself.
    std::vector<float> at3;
    run_loopback_ranks(3, Tuning{}, [&](Communicator& comm) {
      TreeSum sum(count);
      auto r = tree_sum_on(comm, sum, total, split_terms(total, 3, Split::round_robin), false);
      if (comm.rank() == 0) at3 = r;
    });
    ASSERT_TRUE(same_float_bits(at3, got));
    const double levels = std::ceil(std::log2(static_cast<double>(total)));
    const double u = 0x1p-24;
    const double gamma = levels * u / (1.0 - levels * u);
    double worst = 0.0;
    for (std::size_t i = 0; i < count; ++i) {
      double exact = 0.0, magnitude = 0.0;
      for (const auto& t : terms) {
        exact += static_cast<double>(t[i]);
        magnitude += std::fabs(static_cast<double>(t[i]));
      }
      const double err = std::fabs(static_cast<double>(got[i]) - exact);
      ASSERT_LE(err, gamma * magnitude) << "element " << i << " of K=" << total;
      worst = std::max(worst, err / (u * magnitude));
    }
    // The bound is not vacuous: float rounding shows up (the error is not 0 everywhere).
    if (total > 2) {
      EXPECT_GT(worst, 0.0) << "K=" << total;
    }
  }
}

TEST(TreeSum, RefusesRangesThatDoNotTile) {
  TreeSum sum(4);
  auto message = [&](std::int64_t total, const std::vector<std::vector<TermRange>>& ranges, int rank) {
    return error_of([&] { sum.begin(total, ranges, rank); });
  };
  EXPECT_NE(message(8, {{{0, 4}}, {{5, 8}}}, 0).find("do not tile [0, 8) at term 4"), std::string::npos);
  EXPECT_NE(message(8, {{{0, 4}}, {{4, 7}}}, 0).find("end at term 7 of 8"), std::string::npos);
  EXPECT_NE(message(8, {{{0, 4}}, {{3, 8}}}, 0).find("do not tile"), std::string::npos);
  EXPECT_NE(message(8, {{{4, 8}, {0, 4}}}, 0).find("not ascending"), std::string::npos);
  EXPECT_NE(message(8, {{{0, 9}}}, 0).find("not ascending inside [0, 8)"), std::string::npos);
  EXPECT_NE(message(0, {{}}, 0).find("a sum of 0 terms"), std::string::npos);
  EXPECT_NE(message(4, {{{0, 4}}}, 1).find("rank 1 outside the 1 ranks"), std::string::npos);
}

TEST(TreeSum, RefusesTermsOutOfOrderAndAnEarlyFinish) {
  std::vector<float> x(4, 1.0f), out(4);
  run_loopback_ranks(1, Tuning{}, [&](Communicator& comm) {
    TreeSum sum(4);
    sum.begin(3, {{{0, 3}}}, 0);
    sum.add(0, x.data());
    EXPECT_NE(error_of([&] { sum.add(2, x.data()); }).find("added term 2 where its next term is 1"), std::string::npos);
    EXPECT_NE(error_of([&] { sum.finish(comm, out.data()); }).find("added 1 of its 3 terms"), std::string::npos);
    sum.add(1, x.data());
    sum.add(2, x.data());
    EXPECT_NE(error_of([&] { sum.add(3, x.data()); }).find("next term is none"), std::string::npos);
    sum.finish(comm, out.data());
    EXPECT_EQ(out, std::vector<float>(4, 3.0f));
  });
  // Nodes: not at the next term, past the end of the rank's range, outside the tree.
  run_loopback_ranks(2, Tuning{}, [&](Communicator& comm) {
    TreeSum sum(4);
    sum.begin(8, {{{0, 3}}, {{3, 8}}}, comm.rank());
    if (comm.rank() == 0) {
      EXPECT_NE(error_of([&] { sum.add_node(TreeNode{1, 1}, x.data()); }).find("added terms [2, 4) where its next term is 0"),
                std::string::npos);
      EXPECT_NE(error_of([&] { sum.add_node(TreeNode{2, 0}, x.data()); })
                    .find("added terms [0, 4) where its next term is 0, in a range ending at 3"),
                std::string::npos);
      EXPECT_NE(error_of([&] { sum.add_node(TreeNode{4, 0}, x.data()); }).find("is not in the tree of 8 terms"),
                std::string::npos);
    }
  });
}

// exchange: every rank sends each rank (itself included) three messages of different sizes,
// one of them empty; each must arrive whole, from the right sender, in order.
// TreeSum finishes a sum whose two ranks hold one node each (the root's children) with an
// all-reduce: that is the tree's bits only if the all-reduce adds each element once, a + b (never
// from a zero, never through a third value). Every algorithm, P = 2, blocking and in place and
// not, on values whose sum shows any other evaluation: opposite zeros, -0 + -0, cancellation,
// halfway roundings, infinities and NaN-free extremes.
TEST(Allreduce, TwoRanksAddEachElementOnceWithEveryAlgorithm) {
  constexpr std::size_t kCount = 9001;
  const auto value = [](int rank, std::size_t i) -> float {
    switch (i % 8) {
      case 0: return -0.0F;                                       // -0 + -0 = -0; from +0 it would be +0
      case 1: return rank == 0 ? 0.0F : -0.0F;                    // +0 + -0 = +0
      case 2: return rank == 0 ? 1.0F : -1.0F;                    // exact cancellation: +0
      case 3: return rank == 0 ? 1.0F : std::ldexp(1.0F, -24);    // a tie: rounds to even
      case 4: return rank == 0 ? std::numeric_limits<float>::max() : std::numeric_limits<float>::max();  // inf
      case 5: return rank == 0 ? std::numeric_limits<float>::denorm_min() : -0.0F;
      default: return std::ldexp(static_cast<float>((i * 2654435761U + rank * 40503U) % 2001U) / 1000.0F - 1.0F,
                                 static_cast<int>(i % 60) - 30);
    }
  };
  std::vector<float> want(kCount);
  for (std::size_t i = 0; i < kCount; ++i) want[i] = value(0, i) + value(1, i);
  ASSERT_TRUE(std::signbit(want[0]));  // the cases above really are the ones meant
  ASSERT_FALSE(std::signbit(want[1]));
  for (const Algorithm algo : reproducible_algorithms(false)) {
    for (const bool in_place : {false, true}) {
      run_loopback_ranks(2, Tuning{}, [&](Communicator& comm) {
        SCOPED_TRACE(std::string(to_string(algo)) + (in_place ? " in place" : "") + " rank " + std::to_string(comm.rank()));
        std::vector<float> send(kCount), recv(kCount, std::numeric_limits<float>::quiet_NaN());
        for (std::size_t i = 0; i < kCount; ++i) send[i] = value(comm.rank(), i);
        float* out = in_place ? send.data() : recv.data();
        comm.iallreduce(send.data(), out, kCount, DataType::f32, ReduceOp::sum, algo).wait();
        std::size_t first_diff = kCount;
        for (std::size_t i = 0; i < kCount && first_diff == kCount; ++i) {
          if (std::memcmp(&out[i], &want[i], sizeof(float)) != 0) first_diff = i;
        }
        EXPECT_EQ(first_diff, kCount) << "first element that is not a + b";
      });
    }
  }
}

// The same property through TreeSum: two ranks, one node each, finished whole and in segments.
TEST(TreeSum, TwoRanksWithOneNodeEachFinishWithTheTreesBits) {
  for (const std::int64_t total : {2, 8, 16}) {
    for (const std::size_t count : {std::size_t{7}, std::size_t{9001}}) {
      const std::vector<float> expected = serial_tree_sum(all_terms(total, count));
      const auto ranges = split_terms(total, 2, Split::contiguous);
      ASSERT_EQ(maximal_nodes(ranges[0], total).size(), 1U);
      ASSERT_EQ(maximal_nodes(ranges[1], total).size(), 1U);
      run_loopback_ranks(2, Tuning{}, [&](Communicator& comm) {
        TreeSum sum(count);
        for (const bool segments : {false, true}) {
          sum.begin(total, ranges, comm.rank());
          std::vector<std::vector<float>> mine;
          for (const TermRange& r : ranges[static_cast<std::size_t>(comm.rank())]) {
            for (std::int64_t t = r.begin; t < r.end; ++t) {
              mine.push_back(tree_term(t, count));
              sum.add(t, mine.back().data(), /*lend=*/true);
            }
          }
          std::vector<float> result(count, std::numeric_limits<float>::quiet_NaN());
          if (segments) {
            sum.finish_segment(comm, result.data(), BlockRange{count / 2, count - count / 2});
            sum.finish_segment(comm, result.data(), BlockRange{0, count / 2});
            sum.wait_finished();
            EXPECT_EQ(sum.segment_times().size(), count / 2 > 0 ? 2U : 1U);
          } else {
            sum.finish(comm, result.data());
          }
          EXPECT_EQ(std::memcmp(result.data(), expected.data(), count * sizeof(float)), 0)
              << "K=" << total << " count=" << count << (segments ? " in segments" : "") << " rank " << comm.rank();
        }
      });
    }
  }
}

TEST(Exchange, EveryMessageArrivesInOrder) {
  for (int p = 1; p <= 5; ++p) {
    run_loopback_ranks(p, Tuning{}, [&](Communicator& comm) {
      const int me = comm.rank();
      auto value = [](int from, int to, int k, std::size_t i) {
        return static_cast<std::uint32_t>(from * 1000000 + to * 10000 + k * 1000 + static_cast<int>(i));
      };
      auto size = [](int from, int to, int k) {
        return k == 1 ? std::size_t{0} : static_cast<std::size_t>(1 + from + 3 * to + 500 * k);
      };
      std::vector<std::vector<std::uint32_t>> out, in;
      std::vector<PeerBuffer> sends, recvs;
      for (int q = 0; q < p; ++q) {
        for (int k = 0; k < 3; ++k) {
          std::vector<std::uint32_t> m(size(me, q, k));
          for (std::size_t i = 0; i < m.size(); ++i) m[i] = value(me, q, k, i);
          out.push_back(std::move(m));
          in.emplace_back(size(q, me, k), 0u);
        }
      }
      std::size_t j = 0;
      for (int q = 0; q < p; ++q) {
        for (int k = 0; k < 3; ++k, ++j) {
          sends.push_back(PeerBuffer{q, out[j].data(), out[j].size() * sizeof(std::uint32_t)});
          recvs.push_back(PeerBuffer{q, in[j].data(), in[j].size() * sizeof(std::uint32_t)});
        }
      }
      comm.exchange(sends, recvs);
      j = 0;
      for (int q = 0; q < p; ++q) {
        for (int k = 0; k < 3; ++k, ++j) {
          for (std::size_t i = 0; i < in[j].size(); ++i)
            ASSERT_EQ(in[j][i], value(q, me, k, i)) << "P=" << p << " from " << q << " to " << me << " message " << k;
        }
      }
    });
  }
}

// iexchange: the messages move on the progress thread, `then` runs there once they have
// arrived and before the collective queued after it (an all-gather of what `then` computed).
TEST(Exchange, NonBlockingRunsThenBeforeWhatIsQueuedAfter) {
  for (int p = 1; p <= 4; ++p) {
    run_loopback_ranks(p, Tuning{}, [&](Communicator& comm) {
      const int me = comm.rank();
      std::vector<float> out(100), in(static_cast<std::size_t>(p) * 100), sums(static_cast<std::size_t>(p), -1.0f);
      for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(me + 1);
      std::vector<PeerBuffer> sends, recvs;
      for (int q = 0; q < p; ++q) {
        sends.push_back(PeerBuffer{q, out.data(), out.size() * sizeof(float)});
        recvs.push_back(PeerBuffer{q, in.data() + q * 100, 100 * sizeof(float)});
      }
      Work exchanged = comm.iexchange(sends, recvs, [&] {
        float total = 0.0f;
        for (const float v : in) total += v;
        sums[static_cast<std::size_t>(me)] = total;
      });
      Work gathered = comm.iallgather_in_place(sums.data(), sums.size(), DataType::f32);
      exchanged.wait();
      gathered.wait();
      const float want = 100.0f * static_cast<float>(p * (p + 1) / 2);
      EXPECT_EQ(sums, std::vector<float>(static_cast<std::size_t>(p), want)) << "P=" << p << " rank " << me;
    });
  }
}

// Bad messages are refused on the calling thread, before anything moves, naming the call.
TEST(Exchange, RefusesAPeerOutsideTheRanksAndANullBuffer) {
  run_loopback_ranks(2, Tuning{}, [&](Communicator& comm) {
    float x = 0.0f;
    const std::vector<PeerBuffer> none;
    EXPECT_NE(error_of([&] { comm.exchange({PeerBuffer{2, &x, 4}}, none); }).find("exchange: peer 2 outside [0, 2)"),
              std::string::npos);
    EXPECT_NE(error_of([&] { comm.iexchange(none, {PeerBuffer{-1, &x, 4}}); }).find("iexchange: peer -1 outside [0, 2)"),
              std::string::npos);
    EXPECT_NE(error_of([&] { comm.iexchange({PeerBuffer{0, nullptr, 8}}, none); })
                  .find("iexchange: a message of 8 bytes with a null buffer"),
              std::string::npos);
    comm.iexchange(none, none).wait();  // nothing was queued by the refused calls: an empty one completes
  });
}

}  // namespace
}  // namespace hpctrain::coll
