// Reduce-scatter and all-gather by every algorithm they run (ring, rabenseifner = recursive
// halving / doubling, shm = single copy through node shared memory, auto) × ranks 1..16 over the loopback transport: blocking, non-blocking
// and in-place balanced forms, f32/f64/bf16/i64 and every op, against the float64 / exact
// integer reference of reference.hpp (never the code under test); odd counts 0, 1, P-1, 1001 and
// 1000003; integer results bit-identical between algorithms; the cost model's choice; refusal of
// the algorithms these collectives do not run.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "hpctrain/base/error.hpp"
#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/collectives/loopback_transport.hpp"
#include "loopback_ranks.hpp"
#include "reference.hpp"
#include "shm_stress.hpp"

namespace hpctrain::coll {
namespace {

struct Variant {
  const char* name;
  Algorithm algo;
  std::size_t segment_bytes;  ///< ring and halving segments; shm staging (at least 4096)
  /// Virtual nodes (HPCTRAIN_RANKS_PER_NODE): 0 one node; kDividing the largest divisor of the
  /// rank count up to 4 below it (1 for a prime: nodes of one rank), so nodes are of equal size.
  int ranks_per_node = 0;
};
constexpr int kDividing = -1;
const Variant kVariants[] = {
    {"ring", Algorithm::ring, 1 << 20},
    {"rabenseifner", Algorithm::rabenseifner, 1 << 20},
    // 64-byte segments: the halving exchanges wrap the receive window many times.
    {"rabenseifner_small_segments", Algorithm::rabenseifner, 64},
    {"automatic", Algorithm::automatic, 1 << 20},
    {"shm", Algorithm::shm, 1 << 20},
    // 4 KiB staging: at 16 ranks a step moves 32 f64 of every block, so 1001 takes many steps and
    // both staging buffers are reused many times.
    {"shm_small_segments", Algorithm::shm, 64},
    // Several virtual nodes of equal size (16 ranks: 4 x 4; 6: 2 x 3; 10: 5 x 2; 7: 7 x 1).
    {"hierarchical", Algorithm::hierarchical, 1 << 20, kDividing},
    {"hierarchical_small_segments", Algorithm::hierarchical, 64, kDividing},
    {"hierarchical_rpn1", Algorithm::hierarchical, 1 << 20, 1},
    {"automatic_nodes", Algorithm::automatic, 1 << 20, kDividing},
};

int dividing_ranks_per_node(int ranks) {
  for (int k = std::min(4, ranks - 1); k > 1; --k)
    if (ranks % k == 0) return k;
  return 1;
}

Tuning variant_tuning(const Variant& v, int ranks) {
  Tuning t;
  t.ranks_per_node = v.ranks_per_node == kDividing ? dividing_ranks_per_node(ranks) : v.ranks_per_node;
  t.timeout_s = 60;  // a bug shows up as a TimeoutError, not a hung test
  t.ring_segment_bytes = v.segment_bytes;
  t.rabenseifner_segment_bytes = v.segment_bytes;
  t.shm_segment_bytes = std::max<std::size_t>(v.segment_bytes, 4096);
  return t;
}

/// Failures counted over every rank; the first described.
struct Failures {
  std::atomic<std::size_t> count{0};
  std::mutex m;
  std::string first;
  void add(const std::string& what) {
    if (count++ == 0) {
      std::lock_guard<std::mutex> lock(m);
      first = what;
    }
  }
};

std::string where(const char* form, DataType type, ReduceOp op, int p, int r, std::size_t count) {
  return std::string(form) + " " + std::string(to_string(type)) + " " + std::string(to_string(op)) +
         " p=" + std::to_string(p) + " rank=" + std::to_string(r) + " count=" + std::to_string(count);
}

/// `n` elements of `got` against the reference at global indices first_index.. (stride > 1:
/// a sample, for the largest counts).
void check_reduced(Failures& f, const std::string& what, DataType type, ReduceOp op, std::uint64_t seed, int p,
                   const std::byte* got, std::size_t first_index, std::size_t n, std::size_t stride = 1) {
  for (std::size_t i = 0; i < n; i = (i + stride < n || i + 1 == n) ? i + stride : n - 1) {
    const auto e = testing::expected_value(type, op, seed, p, first_index + i);
    const double v = testing::load(type, got, i);
    if (!(std::fabs(v - e.value) <= e.tolerance)) {
      f.add(what + " [" + std::to_string(first_index + i) + "]: got " + std::to_string(v) + ", expected " +
            std::to_string(e.value));
      return;
    }
  }
}

/// What rank q contributes at element i of an all-gather, exact in every type tested.
double gathered_value(int q, std::size_t i) { return static_cast<double>(q * 8 + static_cast<int>(i % 7)); }  // < 128: exact in bf16

void check_gathered(Failures& f, const std::string& what, DataType type, const std::byte* got, int q,
                    std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    if (testing::load(type, got, i) != gathered_value(q, i)) {
      f.add(what + ": block " + std::to_string(q) + " [" + std::to_string(i) + "] is " +
            std::to_string(testing::load(type, got, i)));
      return;
    }
}

/// Every form of both collectives for one (type, op, count): block reduce_scatter (blocking and
/// queued), in-place balanced reduce-scatter, allgather out of place and in place (blocking),
/// iallgather, iallgather_in_place.
void check_all_forms(Communicator& comm, Algorithm algo, DataType type, ReduceOp op, std::size_t count,
                     std::uint64_t seed, Failures& f, std::size_t stride = 1) {
  const int p = comm.size(), r = comm.rank();
  const auto up = static_cast<std::size_t>(p), ur = static_cast<std::size_t>(r);
  const std::size_t elem = size_of(type);
  // Block forms: send holds p blocks of `count`.
  std::vector<std::byte> in(count * up * elem), out(count * elem), out2(count * elem);
  testing::fill_input(type, op, seed, r, in.data(), count * up);
  const std::vector<std::byte> in_copy = in;
  comm.reduce_scatter(in.data(), out.data(), count, type, op, algo);
  Work queued = comm.ireduce_scatter(in.data(), out2.data(), count, type, op, algo);
  // In place over the balanced partition of `count` elements.
  std::vector<std::byte> balanced(count * elem);
  testing::fill_input(type, op, seed, r, balanced.data(), count);
  Work in_place = comm.ireduce_scatter_in_place(balanced.data(), count, type, op, algo);
  queued.wait();
  in_place.wait();
  check_reduced(f, where("reduce_scatter", type, op, p, r, count), type, op, seed, p, out.data(), ur * count, count,
                stride);
  check_reduced(f, where("ireduce_scatter", type, op, p, r, count), type, op, seed, p, out2.data(), ur * count,
                count, stride);
  if (in != in_copy) f.add(where("reduce_scatter wrote its send buffer", type, op, p, r, count));
  const BlockRange own = balanced_block(count, p, r);
  check_reduced(f, where("ireduce_scatter_in_place", type, op, p, r, count), type, op, seed, p,
                balanced.data() + own.offset * elem, own.offset, own.count, stride);
  if (op != ReduceOp::sum) return;  // the all-gathers do not reduce: once per type is enough

  std::vector<std::byte> mine(count * elem), all(count * up * elem), all2(count * up * elem),
      all3(count * up * elem), gathered(count * elem);
  auto fill = [&](std::byte* buf, std::size_t first, std::size_t n, int q) {
    for (std::size_t i = 0; i < n; ++i) testing::store(type, buf, first + i, gathered_value(q, i));
  };
  std::memset(all.data(), 0xff, all.size());
  std::memset(all2.data(), 0xff, all2.size());
  std::memset(all3.data(), 0xff, all3.size());
  std::memset(gathered.data(), 0xff, gathered.size());
  fill(mine.data(), 0, count, r);
  fill(all2.data(), ur * count, count, r);
  fill(gathered.data(), own.offset, own.count, r);
  comm.allgather(mine.data(), all.data(), count, type, algo);
  comm.allgather(all2.data() + ur * count * elem, all2.data(), count, type, algo);
  Work g1 = comm.iallgather(mine.data(), all3.data(), count, type, algo);
  Work g2 = comm.iallgather_in_place(gathered.data(), count, type, algo);
  g1.wait();
  g2.wait();
  for (int q = 0; q < p; ++q) {
    const auto uq = static_cast<std::size_t>(q);
    check_gathered(f, where("allgather", type, op, p, r, count), type, all.data() + uq * count * elem, q, count);
    check_gathered(f, where("allgather(in place)", type, op, p, r, count), type, all2.data() + uq * count * elem, q,
                   count);
    check_gathered(f, where("iallgather", type, op, p, r, count), type, all3.data() + uq * count * elem, q, count);
    const BlockRange blk = balanced_block(count, p, q);
    check_gathered(f, where("iallgather_in_place", type, op, p, r, count), type,
                   gathered.data() + blk.offset * elem, q, blk.count);
  }
}

class ScatterGather : public ::testing::TestWithParam<std::tuple<Variant, int>> {};

void PrintTo(const std::tuple<Variant, int>& p, std::ostream* os) {
  *os << "(" << std::get<0>(p).name << ", " << std::get<1>(p) << " ranks)";
}
std::string variant_and_ranks_name(const ::testing::TestParamInfo<std::tuple<Variant, int>>& info) {
  return std::string(std::get<0>(info.param).name) + "_p" + std::to_string(std::get<1>(info.param));
}

TEST_P(ScatterGather, EveryFormTypeOpAndOddCountMatchesTheReference) {
  const Variant variant = std::get<0>(GetParam());
  const int ranks = std::get<1>(GetParam());
  Failures f;
  testing::run_loopback_ranks(ranks, variant_tuning(variant, ranks), [&](Communicator& comm) {
    std::uint64_t seed = 3;
    for (std::size_t count : {std::size_t{0}, std::size_t{1}, static_cast<std::size_t>(ranks - 1), std::size_t{1001}})
      for (DataType type : {DataType::f32, DataType::f64, DataType::bf16, DataType::i64})
        for (ReduceOp op : testing::all_ops()) check_all_forms(comm, variant.algo, type, op, count, seed++, f);
  });
  EXPECT_EQ(f.count.load(), 0u) << f.first;
}

INSTANTIATE_TEST_SUITE_P(AllVariants, ScatterGather,
                         ::testing::Combine(::testing::ValuesIn(kVariants), ::testing::Range(1, 17)),
                         variant_and_ranks_name);

// 1000003 elements (the block forms: 1000003 per block at 2 and 3 ranks, the balanced forms at
// every rank count listed): many segments, unequal blocks, folded ranks.
class ScatterGatherLarge : public ::testing::TestWithParam<std::tuple<Variant, int>> {};

TEST_P(ScatterGatherLarge, OneMillionAndThree) {
  const Variant variant = std::get<0>(GetParam());
  const int ranks = std::get<1>(GetParam());
  Failures f;
  Variant v = variant;
  v.segment_bytes = std::size_t{64} << 10;
  testing::run_loopback_ranks(ranks, variant_tuning(v, ranks), [&](Communicator& comm) {
    const std::size_t count = 1000003;
    const std::size_t stride = comm.rank() == 0 ? 1 : 61;  // the other ranks check a sample
    if (ranks <= 3) {
      check_all_forms(comm, v.algo, DataType::f32, ReduceOp::sum, count, 91, f, stride);
    } else {
      const std::size_t elem = sizeof(float);
      std::vector<std::byte> buf(count * elem);
      testing::fill_input(DataType::f32, ReduceOp::sum, 92, comm.rank(), buf.data(), count);
      comm.ireduce_scatter_in_place(buf.data(), count, DataType::f32, ReduceOp::sum, v.algo).wait();
      const BlockRange own = balanced_block(count, comm.size(), comm.rank());
      check_reduced(f, where("ireduce_scatter_in_place", DataType::f32, ReduceOp::sum, comm.size(), comm.rank(), count),
                    DataType::f32, ReduceOp::sum, 92, comm.size(), buf.data() + own.offset * elem, own.offset,
                    own.count);
      std::vector<float> gathered(count, -1.f);
      for (std::size_t i = 0; i < own.count; ++i) gathered[own.offset + i] = static_cast<float>(gathered_value(comm.rank(), i));
      comm.iallgather_in_place(gathered.data(), count, DataType::f32, v.algo).wait();
      for (int q = 0; q < comm.size(); ++q) {
        const BlockRange blk = balanced_block(count, comm.size(), q);
        check_gathered(f, "iallgather_in_place 1000003", DataType::f32,
                       reinterpret_cast<const std::byte*>(gathered.data() + blk.offset), q, blk.count);
      }
    }
  });
  EXPECT_EQ(f.count.load(), 0u) << f.first;
}

INSTANTIATE_TEST_SUITE_P(AllVariants, ScatterGatherLarge,
                         ::testing::Combine(::testing::Values(kVariants[0], kVariants[1], kVariants[4], kVariants[6]),
                                            ::testing::Values(2, 3, 6, 16)),
                         variant_and_ranks_name);

// Integer sums are exact, so ring, halving and shm must give the same bytes (floats may differ in
// the last bits: another combination order); at every rank count 1..16, block and in place.
TEST(ScatterGatherDeterminism, IntegerResultsAreTheSameBytesForEveryAlgorithm) {
  for (int ranks = 1; ranks <= 16; ++ranks) {
    Failures f;
    Tuning t;
    t.timeout_s = 60;
    testing::run_loopback_ranks(ranks, t, [&](Communicator& comm) {
      const std::size_t count = 1001;
      std::vector<std::int64_t> in(count * static_cast<std::size_t>(ranks));
      testing::fill_input(DataType::i64, ReduceOp::sum, 17, comm.rank(), in.data(), in.size());
      std::vector<std::int64_t> ring(count), halving(count), shm(count), ring_bal(in.begin(), in.begin() + count),
          halving_bal = ring_bal, shm_bal = ring_bal;
      comm.reduce_scatter(in.data(), ring.data(), count, DataType::i64, ReduceOp::sum, Algorithm::ring);
      comm.reduce_scatter(in.data(), halving.data(), count, DataType::i64, ReduceOp::sum, Algorithm::rabenseifner);
      comm.reduce_scatter(in.data(), shm.data(), count, DataType::i64, ReduceOp::sum, Algorithm::shm);
      comm.ireduce_scatter_in_place(ring_bal.data(), count, DataType::i64, ReduceOp::sum, Algorithm::ring).wait();
      comm.ireduce_scatter_in_place(halving_bal.data(), count, DataType::i64, ReduceOp::sum, Algorithm::rabenseifner)
          .wait();
      comm.ireduce_scatter_in_place(shm_bal.data(), count, DataType::i64, ReduceOp::sum, Algorithm::shm).wait();
      if (std::memcmp(ring.data(), halving.data(), count * 8) != 0) f.add("block reduce_scatter differs (halving)");
      if (std::memcmp(ring.data(), shm.data(), count * 8) != 0) f.add("block reduce_scatter differs (shm)");
      const BlockRange own = balanced_block(count, ranks, comm.rank());
      if (std::memcmp(ring_bal.data() + own.offset, halving_bal.data() + own.offset, own.count * 8) != 0)
        f.add("in-place reduce_scatter differs (halving)");
      if (std::memcmp(ring_bal.data() + own.offset, shm_bal.data() + own.offset, own.count * 8) != 0)
        f.add("in-place reduce_scatter differs (shm)");
    });
    EXPECT_EQ(f.count.load(), 0u) << "ranks=" << ranks << ": " << f.first;
  }
}

// Hierarchical over virtual nodes of equal size: the same integer bytes as the ring, block and in
// place, and the all-gather the same bytes as the ring's.
TEST(ScatterGatherDeterminism, HierarchicalIntegerResultsEqualTheRing) {
  for (int ranks = 2; ranks <= 16; ++ranks) {
    Failures f;
    Tuning t;
    t.timeout_s = 60;
    t.ranks_per_node = dividing_ranks_per_node(ranks);
    t.shm_segment_bytes = 4096;  // many steps at 1001 elements
    testing::run_loopback_ranks(ranks, t, [&](Communicator& comm) {
      const std::size_t count = 1001;
      const auto up = static_cast<std::size_t>(ranks);
      std::vector<std::int64_t> in(count * up);
      testing::fill_input(DataType::i64, ReduceOp::sum, 23, comm.rank(), in.data(), in.size());
      std::vector<std::int64_t> ring(count), hier(count), ring_bal(in.begin(), in.begin() + count), hier_bal = ring_bal;
      comm.reduce_scatter(in.data(), ring.data(), count, DataType::i64, ReduceOp::sum, Algorithm::ring);
      comm.reduce_scatter(in.data(), hier.data(), count, DataType::i64, ReduceOp::sum, Algorithm::hierarchical);
      comm.ireduce_scatter_in_place(ring_bal.data(), count, DataType::i64, ReduceOp::sum, Algorithm::ring).wait();
      comm.ireduce_scatter_in_place(hier_bal.data(), count, DataType::i64, ReduceOp::sum, Algorithm::hierarchical)
          .wait();
      if (ring != hier) f.add("block reduce_scatter differs (hierarchical)");
      const BlockRange own = balanced_block(count, ranks, comm.rank());
      if (std::memcmp(ring_bal.data() + own.offset, hier_bal.data() + own.offset, own.count * 8) != 0)
        f.add("in-place reduce_scatter differs (hierarchical)");
      std::vector<std::int64_t> ring_all(count * up), hier_all(count * up);
      comm.allgather(ring.data(), ring_all.data(), count, DataType::i64, Algorithm::ring);
      comm.allgather(ring.data(), hier_all.data(), count, DataType::i64, Algorithm::hierarchical);
      if (ring_all != hier_all) f.add("allgather differs (hierarchical)");
    });
    EXPECT_EQ(f.count.load(), 0u) << "ranks=" << ranks << " ranks_per_node=" << t.ranks_per_node << ": " << f.first;
  }
}

// Hierarchical over nodes of unequal size (3 ranks in virtual nodes of 2: sizes 2 and 1) is
// refused at every rank, naming the algorithm and the sizes, before any message; the same
// communicator then runs auto (which leaves hierarchical out there) and a hierarchical all-reduce.
TEST(ScatterGatherErrors, HierarchicalOnUnequalNodesIsRefused) {
  for (int form = 0; form < 2; ++form) {
    Tuning t;
    t.timeout_s = 10;
    t.ranks_per_node = 2;
    std::atomic<int> refused{0};
    Failures f;
    testing::run_loopback_ranks(3, t, [&](Communicator& comm) {
      std::vector<std::int64_t> in(6, 1), out(2, 0);
      try {
        if (form == 0) comm.reduce_scatter(in.data(), out.data(), 2, DataType::i64, ReduceOp::sum, Algorithm::hierarchical);
        else comm.iallgather_in_place(in.data(), 6, DataType::i64, Algorithm::hierarchical).wait();
        f.add("hierarchical ran over nodes of 2 and 1 ranks");
      } catch (const hpctrain::Error& e) {
        const std::string what = e.what();
        if (what.find("'hierarchical'") != std::string::npos && what.find("equal size") != std::string::npos &&
            what.find("hold 2, 1 ranks") != std::string::npos && what.find("HPCTRAIN_RANKS_PER_NODE=2") != std::string::npos)
          ++refused;
        else f.add("unclear refusal: " + what);
      }
      comm.reduce_scatter(in.data(), out.data(), 2, DataType::i64, ReduceOp::sum, Algorithm::automatic);
      if (out[0] != 3 || out[1] != 3) f.add("auto after the refusal gave " + std::to_string(out[0]));
      std::int64_t x = 1;
      comm.allreduce(&x, 1, ReduceOp::sum, Algorithm::hierarchical);
      if (x != 3) f.add("hierarchical all-reduce after the refusal gave " + std::to_string(x));
    });
    EXPECT_EQ(refused.load(), 3) << "form " << form;
    EXPECT_EQ(f.count.load(), 0u) << f.first;
  }
}

// Algorithms these collectives do not run are refused on the calling thread, naming the
// algorithm and what is accepted, before any message (one rank: nothing to hang on).
TEST(ScatterGatherErrors, UnsupportedAlgorithmIsRefusedNamingIt) {
  Tuning t;
  t.timeout_s = 10;
  testing::run_loopback_ranks(1, t, [&](Communicator& comm) {
    std::vector<float> a(4), b(4);
    for (Algorithm algo : {Algorithm::tree, Algorithm::recursive_doubling, Algorithm::mpi, Algorithm::nccl}) {
      const std::string name(to_string(algo));
      auto expect_refused = [&](const std::function<void()>& call, const char* op) {
        try {
          call();
          ADD_FAILURE() << op << " accepted '" << name << "'";
        } catch (const hpctrain::Error& e) {
          const std::string what = e.what();
          EXPECT_NE(what.find(op), std::string::npos) << what;
          EXPECT_NE(what.find("'" + name + "'"), std::string::npos) << what;
          EXPECT_NE(what.find("rabenseifner"), std::string::npos) << what;
        }
      };
      expect_refused([&] { comm.reduce_scatter(a.data(), b.data(), 4, DataType::f32, ReduceOp::sum, algo); },
                     "reduce_scatter");
      expect_refused([&] { comm.allgather(a.data(), b.data(), 4, DataType::f32, algo); }, "allgather");
      expect_refused([&] { (void)comm.ireduce_scatter_in_place(a.data(), 4, DataType::f32, ReduceOp::sum, algo); },
                     "ireduce_scatter_in_place");
      expect_refused([&] { (void)comm.iallgather_in_place(a.data(), 4, DataType::f32, algo); }, "iallgather_in_place");
    }
  });
}

// Back-to-back shm reduce-scatters, all-gathers and all-reduces over 4 KiB staging buffers
// (shm_stress.hpp): a missing slot-free wait or release/acquire pair gives wrong sums here.
TEST(ScatterGatherShm, StressBackToBackWithAllreduce) {
  for (int ranks : {2, 3, 4, 7, 16}) {
    Failures f;
    Tuning t;
    t.timeout_s = 60;
    t.shm_segment_bytes = 4096;
    t.shm_small_max_bytes = 1024;
    testing::run_loopback_ranks(ranks, t, [&](Communicator& comm) {
      std::string mine;
      if (testing::shm_scatter_gather_stress(comm, ranks > 4 ? 150 : 600, &mine) != 0) f.add(mine);
    });
    EXPECT_EQ(f.count.load(), 0u) << "ranks=" << ranks << ": " << f.first;
  }
}

// shm over several (virtual) nodes: one clear error at every rank, naming shm, the node size and
// what runs there instead; the communicator still works afterwards.
TEST(ScatterGatherErrors, ShmOnSeveralVirtualNodesIsRefused) {
  Tuning t;
  t.timeout_s = 10;
  t.ranks_per_node = 2;
  std::atomic<int> named{0};
  testing::run_loopback_ranks(4, t, [&](Communicator& comm) {
    std::vector<std::int64_t> in(8, 1), out(2);
    for (int form = 0; form < 2; ++form) {
      try {
        if (form == 0) comm.reduce_scatter(in.data(), out.data(), 2, DataType::i64, ReduceOp::sum, Algorithm::shm);
        else comm.iallgather_in_place(in.data(), 8, DataType::i64, Algorithm::shm).wait();
        ADD_FAILURE() << "shm ran over two virtual nodes";
      } catch (const hpctrain::Error& e) {
        const std::string what = e.what();
        if (what.find("'shm'") != std::string::npos && what.find("HPCTRAIN_RANKS_PER_NODE=2") != std::string::npos &&
            what.find("use 'hierarchical' for several nodes") != std::string::npos)
          ++named;
        else
          ADD_FAILURE() << what;
      }
    }
    comm.reduce_scatter(in.data(), out.data(), 2, DataType::i64, ReduceOp::sum, Algorithm::ring);
    EXPECT_EQ(out[0], 4);
  });
  EXPECT_EQ(named.load(), 8);
}

// A rank that never reaches the shm barrier: the other ends with the collective timeout, naming
// the collective and the missing rank (as the shm all-reduce does).
TEST(ScatterGatherErrors, ShmTimeoutNamesTheMissingPeer) {
  for (int form = 0; form < 2; ++form) {
    Tuning t;
    t.timeout_s = 0.5;
    std::string message;
    auto group = make_loopback_group(2);
    std::vector<std::int64_t> in(4, 1), out(2);
    std::thread skipper([&] {
      Communicator comm(std::move(group[1]), t);
      std::vector<std::int64_t> a(4, 1), b(2);
      comm.reduce_scatter(a.data(), b.data(), 2, DataType::i64, ReduceOp::sum, Algorithm::shm);  // then skips
      std::this_thread::sleep_for(std::chrono::seconds(1));
    });
    try {
      Communicator comm(std::move(group[0]), t);
      comm.reduce_scatter(in.data(), out.data(), 2, DataType::i64, ReduceOp::sum, Algorithm::shm);
      if (form == 0) comm.reduce_scatter(in.data(), out.data(), 2, DataType::i64, ReduceOp::sum, Algorithm::shm);
      else comm.allgather(out.data(), in.data(), 2, DataType::i64, Algorithm::shm);
      ADD_FAILURE() << "the collective completed without rank 1";
    } catch (const TimeoutError& e) {
      message = e.what();
    }
    skipper.join();
    EXPECT_NE(message.find(form == 0 ? "reduce_scatter(shm)" : "allgather(shm)"), std::string::npos) << message;
    EXPECT_NE(message.find("did not complete within 0.5 s"), std::string::npos) << message;
    EXPECT_NE(message.find("still waiting in node shared memory for: rank 1"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace hpctrain::coll
