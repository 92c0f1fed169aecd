// The cost model behind Algorithm::automatic and the tuning file (tuning.hpp): with given
// parameters, choose_allreduce picks the algorithm the formulas say, predicted times match the
// formulas computed here independently, and bad files fail naming the file and the key.

#include <gtest/gtest.h>


#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "hpctrain/base/error.hpp"
#include "process_temp_dir.hpp"
#include "hpctrain/collectives/device_memory.hpp"  // nccl_built
#include "hpctrain/collectives/tuning.hpp"

namespace {

using hpctrain::coll::Algorithm;
using hpctrain::coll::Tuning;
using hpctrain::coll::algorithm_names;
using hpctrain::coll::nccl_built;
using hpctrain::coll::parse_algorithm;
using hpctrain::coll::to_string;
namespace fs = std::filesystem;

constexpr std::size_t kMiB = std::size_t{1} << 20;

// A file in the test process's temporary directory (removed at exit).
std::string write_file(const std::string& name, const std::string& text) {
  const fs::path p = hpctrain::testing::process_temp_dir("hpctrain_tuning_test_") / name;
  std::ofstream(p) << text;
  return p.string();
}

std::string fmt(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", x);
  return buf;
}

// Parameters as a tuning file (every digit kept).
std::string model_file(double a_in, double b_in, double a_out, double b_out, double g, double sb, double ss) {
  return std::string(R"({"schema_version": 1, "model": {)") + R"("alpha_intra_s": )" + fmt(a_in) +
         R"(, "beta_intra_s_per_byte": )" + fmt(b_in) + R"(, "alpha_inter_s": )" + fmt(a_out) +
         R"(, "beta_inter_s_per_byte": )" + fmt(b_out) + R"(, "gamma_s_per_byte": )" + fmt(g) +
         R"(, "shm_beta_s_per_byte": )" + fmt(sb) + R"(, "shm_sync_s": )" + fmt(ss) + "}}";
}

// Expected message: the error names the file and the key.
void expect_error(const std::string& path, const std::string& key) {
  try {
    (void)Tuning::from_file(path);
    ADD_FAILURE() << "no error for " << path;
  } catch (const hpctrain::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(path), std::string::npos) << what;
    EXPECT_NE(what.find(key), std::string::npos) << what;
  }
}

struct EnvGuard {
  explicit EnvGuard(const char* name, const std::string& value) : name_(name) { ::setenv(name, value.c_str(), 1); }
  ~EnvGuard() { ::unsetenv(name_); }
  EnvGuard(const EnvGuard&) = delete;
  EnvGuard& operator=(const EnvGuard&) = delete;
  const char* name_;
};

TEST(CostModel, LatencyBoundPicksFewestMessages) {
  // α dominates at 8 B: recursive doubling sends lg 8 = 3 messages, the binomial tree 5,
  // Rabenseifner 6, the ring 14; shared memory is made slow (1 ms per flag).
  const Tuning t = Tuning::from_file(write_file("latency.json", model_file(1e-5, 1e-10, 1e-5, 1e-10, 1e-10, 1e-10, 1e-3)));
  EXPECT_EQ(t.choose_allreduce(8, 8, 8), Algorithm::recursive_doubling);
  EXPECT_EQ(t.choose_allreduce(8, 8, 1), Algorithm::recursive_doubling);
  // Large vectors over 8 ranks with the same links: Rabenseifner and ring move 2(p-1)/p n; with
  // α still large, Rabenseifner's 2 lg p messages beat the ring's 2(p-1)·segments.
  EXPECT_EQ(t.choose_allreduce(64 * kMiB, 8, 1), Algorithm::rabenseifner);
  // With the default segmenting over a non-power of two, Rabenseifner pays a whole-vector fold
  // while the ring does not, so the ring wins bandwidth-bound vectors over 6 ranks.
  EXPECT_EQ(t.choose_allreduce(64 * kMiB, 6, 1), Algorithm::ring);
}

TEST(CostModel, OneNodeLargeMessagesUseSharedMemory) {
  // Copies at 50 GB/s against 2 GB/s point-to-point: shm on one node at large n.
  const Tuning t = Tuning::from_file(write_file("shm.json", model_file(2e-6, 5e-10, 2e-6, 5e-10, 1e-10, 2e-11, 1e-6)));
  EXPECT_EQ(t.choose_allreduce(64 * kMiB, 4, 4), Algorithm::shm);
  EXPECT_EQ(t.choose_allreduce(64 * kMiB, 4, 0), Algorithm::shm);  // 0: one node
  // Over two nodes shm cannot run and hierarchical needs more than one rank per node.
  EXPECT_TRUE(std::isinf(t.predict_allreduce_s(Algorithm::shm, kMiB, 4, 2)));
  EXPECT_TRUE(std::isinf(t.predict_allreduce_s(Algorithm::hierarchical, kMiB, 4, 4)));
  EXPECT_TRUE(std::isinf(t.predict_allreduce_s(Algorithm::hierarchical, kMiB, 4, 1)));
  EXPECT_TRUE(std::isinf(t.predict_allreduce_s(Algorithm::mpi, kMiB, 4, 4)));
  EXPECT_NE(t.choose_allreduce(64 * kMiB, 4, 1), Algorithm::shm);
}

// `auto` never picks a vendor pass-through (mpi, nccl), even with every candidate bit set and at
// any size, rank count and node layout; the model prices neither.
TEST(CostModel, AutoNeverPicksVendorPassThroughs) {
  const Tuning t;
  for (Algorithm vendor : {Algorithm::mpi, Algorithm::nccl}) {
    EXPECT_TRUE(std::isinf(t.predict_allreduce_s(vendor, kMiB, 4, 4))) << to_string(vendor);
  }
  for (std::size_t bytes : {std::size_t{8}, 64 * std::size_t{1024}, kMiB, 64 * kMiB})
    for (int ranks : {1, 2, 3, 8, 64})
      for (int per_node : {0, 1, 2, ranks}) {
        const Algorithm a = t.cheapest_allreduce(bytes, ranks, per_node, ~std::uint32_t{0});
        EXPECT_NE(a, Algorithm::nccl) << bytes << " B, p=" << ranks << ", per node " << per_node;
        EXPECT_NE(a, Algorithm::mpi) << bytes << " B, p=" << ranks << ", per node " << per_node;
      }
}

// Every build lists and parses `nccl` (a build without NCCL refuses it at the call, saying why).
TEST(Algorithms, NcclIsListedAndParsed) {
  EXPECT_EQ(parse_algorithm("nccl"), Algorithm::nccl);
  EXPECT_EQ(to_string(Algorithm::nccl), "nccl");
  EXPECT_NE(algorithm_names().find(", nccl"), std::string::npos) << algorithm_names();
#ifdef HPCTRAIN_HAVE_NCCL
  EXPECT_TRUE(nccl_built());
#else
  EXPECT_FALSE(nccl_built());
#endif
}

TEST(CostModel, SeveralNodesLargeMessagesUseHierarchical) {
  // A slow network (1 GB/s, 20 µs) and fast shared memory: 16 ranks on 4 nodes of 4.
  const Tuning t = Tuning::from_file(write_file("hier.json", model_file(1e-6, 1e-10, 2e-5, 1e-9, 1e-10, 2e-11, 1e-6)));
  EXPECT_EQ(t.choose_allreduce(64 * kMiB, 16, 4), Algorithm::hierarchical);
  EXPECT_EQ(t.choose_allreduce(64 * kMiB, 16, 16), Algorithm::shm);  // all on one node
  EXPECT_NE(t.choose_allreduce(64 * kMiB, 16, 1), Algorithm::hierarchical);
}

TEST(CostModel, PredictionsFollowTheFormulas) {
  const double a = 3e-6, b = 2e-10, ai = 7e-6, bi = 5e-10, g = 3e-10, sb = 1e-10, ss = 2e-6;
  const Tuning t = Tuning::from_file(write_file("formula.json", model_file(a, b, ai, bi, g, sb, ss)));
  const double n = 3.0 * kMiB;
  // Ring, 6 ranks on one node: chunk n/6 = 512 KiB < 1 MiB segment, so one segment per step.
  const double p = 6;
  const double ring = 2 * (p - 1) * a + 2 * (p - 1) / p * n * b + (p - 1) / p * n * g;
  EXPECT_NEAR(t.predict_allreduce_s(Algorithm::ring, 3 * kMiB, 6, 6), ring, 1e-12 * ring);
  // Rabenseifner, 6 ranks on 6 nodes: inter-node links, p' = 4 plus the fold of 2 extra ranks.
  const double rab = 2 * 2 * ai + 2 * 3.0 / 4 * n * bi + 3.0 / 4 * n * g + 2 * (ai + n * bi) + n * g;
  EXPECT_NEAR(t.predict_allreduce_s(Algorithm::rabenseifner, 3 * kMiB, 6, 1), rab, 1e-12 * rab);
  // Binomial tree at 4 KiB over 5 ranks: 2⌈lg 5⌉ - 1 = 5 message steps (the root's last
  // receive and first send are one exchange), 3 reductions. 4 KiB is below eager_bytes, so the
  // broadcast's two levels carry 2 + 1 messages through their senders' links: 2 + 1 + 3 = 6 nβ.
  const double m = 4096;
  const double tree = 5 * a + 6 * m * b + 3 * m * g;
  EXPECT_NEAR(t.predict_allreduce_s(Algorithm::tree, 4096, 5, 5), tree, 1e-12 * tree);
  // With eager_bytes 0 (every send waits for its receiver) the 5 steps move n each.
  Tuning waiting = t;
  waiting.model.eager_bytes = 0;
  const double tree_waiting = 5 * (a + m * b) + 3 * m * g;
  EXPECT_NEAR(waiting.predict_allreduce_s(Algorithm::tree, 4096, 5, 5), tree_waiting, 1e-12 * tree_waiting);
  // Hierarchical, 8 ranks as 2 nodes of 4: node phases + the best flat algorithm for n/4 over 2
  // nodes with β·4 (2 ranks: every flat algorithm's candidates computed here).
  const double slice = n / 4, k = 4;
  const double node_phases = 2 * ss + 2 * n * sb + (k - 1) / k * n * g;
  const double seg = std::ceil((slice / 2) / (1 << 20));
  const double across_ring = 2 * 1 * seg * ai + 2 * 1 * (slice / 2) * (bi * k) + 1 * (slice / 2) * g;
  const double across_rd = 1 * (ai + slice * bi * k + slice * g);
  const double across_rab = 2 * ai + 2 * 0.5 * slice * bi * k + 0.5 * slice * g;
  // Double binary tree over 2 nodes: depth 1, s = 256 KiB, m = 2 segments per tree, 2·1 + 2 - 1
  // = 3 steps; each rank has one link in each tree (2 links, below 2m = 4).
  const double s_tree = std::min(256.0 * 1024, slice / 2);
  const double m_tree = std::ceil(slice / (2 * s_tree));
  const double across_tree = (2 + m_tree - 1) * (ai + 2 * s_tree * bi * k + 2 * s_tree * g);
  const double hier = node_phases + std::min({across_ring, across_rd, across_rab, across_tree});
  EXPECT_NEAR(t.predict_allreduce_s(Algorithm::hierarchical, 3 * kMiB, 8, 4), hier, 1e-12 * hier);
  // The choice is the smallest prediction.
  const Algorithm chosen = t.choose_allreduce(3 * kMiB, 8, 4);
  for (Algorithm other : {Algorithm::ring, Algorithm::tree, Algorithm::recursive_doubling, Algorithm::rabenseifner,
                          Algorithm::hierarchical}) {
    EXPECT_LE(t.predict_allreduce_s(chosen, 3 * kMiB, 8, 4), t.predict_allreduce_s(other, 3 * kMiB, 8, 4));
  }
}

// The double binary tree's links per rank, counted here from its definition (tree_allreduce.cpp):
// the in-order balanced binary tree over positions 0..p-1 (the root of [lo, hi) at the middle),
// and the same tree over positions shifted by one rank. Returns the most links (parent and
// children over both trees) of any rank, and the depth.
std::pair<int, int> double_tree_shape(int p) {
  std::vector<int> links(static_cast<std::size_t>(p), 0);
  int depth = 0;
  for (int shift = 0; shift < 2; ++shift) {
    // (lo, hi, level) ranges still to split; the root of each has a parent unless level 0.
    std::vector<std::array<int, 3>> todo = {{0, p, 0}};
    while (!todo.empty()) {
      const auto [lo, hi, level] = todo.back();
      todo.pop_back();
      const int mid = lo + (hi - lo) / 2;
      const int rank = (mid - shift + p) % p;
      links[static_cast<std::size_t>(rank)] += (level > 0) + (lo < mid) + (mid + 1 < hi);
      depth = std::max(depth, level);
      if (lo < mid) todo.push_back({lo, mid, level + 1});
      if (mid + 1 < hi) todo.push_back({mid + 1, hi, level + 1});
    }
  }
  return {*std::max_element(links.begin(), links.end()), depth};
}

// The pipelined double binary tree: S = 2d + m - 1 steps (each segment climbs and descends a
// tree of depth d), each moving min(2m, L) segments through the busiest rank (L its links), and
// the counts behind it: 4 links at p = 2^k - 1 (interior in one tree, leaf in the other), 5 at 16.
TEST(CostModel, DoubleBinaryTreePipelineFollowsTheFormula) {
  const double a = 3e-6, b = 2e-10, g = 3e-10;
  const Tuning t = Tuning::from_file(write_file("dbt.json", model_file(a, b, a, b, g, 1e-10, 1e-6)));
  EXPECT_EQ(double_tree_shape(15), std::make_pair(4, 3));
  EXPECT_EQ(double_tree_shape(16), std::make_pair(5, 4));
  for (int p : {3, 15, 16, 48}) {
    const auto [links, depth] = double_tree_shape(p);
    for (std::size_t bytes : {kMiB / 2 + 4, 2 * kMiB, 16 * kMiB}) {  // m = 2 (s = n/2 < 256 KiB: m = 1), 4, 32
      const double n = static_cast<double>(bytes);
      const double s = std::min(256.0 * 1024, n / 2);
      const double m = std::ceil(n / (2 * s));
      const double expect = (2 * depth + m - 1) * (a + std::min(2 * m, double(links)) * s * b + 2 * s * g);
      EXPECT_NEAR(t.predict_allreduce_s(Algorithm::tree, bytes, p, p), expect, 1e-12 * expect) << p << " " << bytes;
    }
  }
}

// The far tier (alpha_far_s, nodes_per_switch): a message between ranks under different leaf
// switches costs alpha_far_s. Recursive doubling and Rabenseifner pay it on their exchanges at
// distance >= the switch group, the binomial tree on its levels that far, the ring and the
// pipelined tree on every step (their slowest link paces them); without nodes_per_switch the
// model is the one-tier one.
TEST(CostModel, FarTierPricesTheStepsAcrossSwitches) {
  const double a = 2e-6, b = 8e-11, af = 5e-6;
  const std::string one_tier = model_file(a, b, a, b, 0.0, 1e-10, 1e-6);
  std::string two_tier = one_tier;
  two_tier.insert(two_tier.size() - 2, R"(, "alpha_far_s": )" + fmt(af) + R"(, "nodes_per_switch": 2)");
  std::string shared = two_tier;  // the far links shared by 4 flows
  shared.insert(shared.size() - 2, R"(, "far_beta_scale": 4)");
  const Tuning contended = Tuning::from_file(write_file("shared.json", shared));
  const Tuning flat = Tuning::from_file(write_file("flat.json", one_tier));
  const Tuning far = Tuning::from_file(write_file("far.json", two_tier));
  const double n = 4096;
  // 16 ranks, one per node, 2 nodes per switch: distances 1 near, 2, 4, 8 far.
  const double rd = (a + 3 * af) + 4 * n * b;
  EXPECT_NEAR(far.predict_allreduce_s(Algorithm::recursive_doubling, 4096, 16, 1), rd, 1e-12 * rd);
  const double rab = 2 * (a + 3 * af) + 2 * 15.0 / 16 * n * b;
  EXPECT_NEAR(far.predict_allreduce_s(Algorithm::rabenseifner, 4096, 16, 1), rab, 1e-12 * rab);
  // Binomial: reduce and broadcast over distances 1, 2, 4 and the exchange 0 <-> 8; eager, so
  // the broadcast's 3 levels carry 3 + 2 + 1 messages: 3 + 1 + 6 = 10 nβ.
  const double binomial = 2 * (a + 2 * af) + af + 10 * n * b;
  EXPECT_NEAR(far.predict_allreduce_s(Algorithm::tree, 4096, 16, 1), binomial, 1e-12 * binomial);
  const double ring = 2 * 15 * af + 2 * 15.0 / 16 * n * b;
  EXPECT_NEAR(far.predict_allreduce_s(Algorithm::ring, 4096, 16, 1), ring, 1e-12 * ring);
  // 2 ranks per node: the switch group is 4 ranks (distances 1, 2 near; 4, 8 far).
  const double rd2 = (2 * a + 2 * af) + 4 * n * b;
  EXPECT_NEAR(far.predict_allreduce_s(Algorithm::recursive_doubling, 4096, 16, 2), rd2, 1e-12 * rd2);
  // All ranks under one switch, or no nodes_per_switch: the one-tier model.
  for (Algorithm algo : {Algorithm::ring, Algorithm::tree, Algorithm::recursive_doubling, Algorithm::rabenseifner}) {
    for (std::size_t bytes : {std::size_t{8}, kMiB, 16 * kMiB}) {
      EXPECT_EQ(far.predict_allreduce_s(algo, bytes, 2, 1), flat.predict_allreduce_s(algo, bytes, 2, 1));
      EXPECT_LT(flat.predict_allreduce_s(algo, bytes, 16, 1), far.predict_allreduce_s(algo, bytes, 16, 1));
    }
  }
  // The reduce-scatter's halving pays it too.
  const double hd_rs = (a + 3 * af) + 15.0 / 16 * n * b;
  EXPECT_NEAR(far.predict_reduce_scatter_s(Algorithm::rabenseifner, 4096, 16, 1), hd_rs, 1e-12 * hd_rs);
  // far_beta_scale 4: the far steps' bytes of the all-ranks exchanges move at 4β. Recursive
  // doubling moves n at each of distances 2, 4, 8; Rabenseifner's all-reduce n/2d at distance d
  // (n/4, n/8, n/16 far); the halving reduce-scatter n·d/16 (n/8, n/4, n/2 far). The ring and
  // the binomial tree are unchanged.
  const double rd4 = (a + 3 * af) + n * b + 3 * n * 4 * b;
  EXPECT_NEAR(contended.predict_allreduce_s(Algorithm::recursive_doubling, 4096, 16, 1), rd4, 1e-12 * rd4);
  const double rab4 = 2 * ((a + 3 * af) + n / 2 * b + (n / 4 + n / 8 + n / 16) * 4 * b);
  EXPECT_NEAR(contended.predict_allreduce_s(Algorithm::rabenseifner, 4096, 16, 1), rab4, 1e-12 * rab4);
  const double hd4 = (a + 3 * af) + n / 16 * b + (n / 8 + n / 4 + n / 2) * 4 * b;
  EXPECT_NEAR(contended.predict_reduce_scatter_s(Algorithm::rabenseifner, 4096, 16, 1), hd4, 1e-12 * hd4);
  for (Algorithm algo : {Algorithm::ring, Algorithm::tree}) {
    EXPECT_EQ(contended.predict_allreduce_s(algo, 4096, 16, 1), far.predict_allreduce_s(algo, 4096, 16, 1));
  }
  // nodes_per_switch and far_beta_scale without alpha_far_s: the far steps keep α, their
  // bytes still move at 4β.
  std::string beta_only = one_tier;
  beta_only.insert(beta_only.size() - 2, R"(, "nodes_per_switch": 2, "far_beta_scale": 4)");
  const Tuning shared_only = Tuning::from_file(write_file("beta-only.json", beta_only));
  const double rd_beta = 4 * a + n * b + 3 * n * 4 * b;
  EXPECT_NEAR(shared_only.predict_allreduce_s(Algorithm::recursive_doubling, 4096, 16, 1), rd_beta, 1e-12 * rd_beta);
}

// Reduce-scatter / all-gather (tuning.hpp's formulas, recomputed here): ring vs recursive
// halving / doubling; auto picks halving for latency-bound vectors, the ring for large ones
// when the fold (non-power-of-two P) costs more than the ring's extra latency; the candidates
// of auto_algorithms and HPCTRAIN_ALLREDUCE_ALGO's independence.
TEST(CostModel, ReduceScatterAndAllgatherFollowTheirFormulas) {
  const double a = 3e-6, b = 2e-10, ai = 7e-6, bi = 5e-10, g = 3e-10, sb = 1e-10, ss = 2e-6;
  Tuning t = Tuning::from_file(write_file("scatter.json", model_file(a, b, ai, bi, g, sb, ss)));
  const double n = 3.0 * kMiB;
  // 6 ranks on one node: ring chunk 512 KiB < 1 MiB segment, one segment per step.
  const double p = 6;
  const double ring_rs = (p - 1) * a + (p - 1) / p * n * b + (p - 1) / p * n * g;
  const double ring_ag = (p - 1) * a + (p - 1) / p * n * b;
  EXPECT_NEAR(t.predict_reduce_scatter_s(Algorithm::ring, 3 * kMiB, 6, 6), ring_rs, 1e-12 * ring_rs);
  EXPECT_NEAR(t.predict_allgather_s(Algorithm::ring, 3 * kMiB, 6, 6), ring_ag, 1e-12 * ring_ag);
  // Halving / doubling, 6 ranks on 6 nodes: p' = 4 plus the fold of 2 extra ranks.
  const double hd_rs = 2 * ai + 3.0 / 4 * n * bi + 3.0 / 4 * n * g + 2 * ai + (n + n / p) * bi + n * g;
  const double hd_ag = 2 * ai + 3.0 / 4 * n * bi + 2 * ai + (n / p + n) * bi;
  EXPECT_NEAR(t.predict_reduce_scatter_s(Algorithm::rabenseifner, 3 * kMiB, 6, 1), hd_rs, 1e-12 * hd_rs);
  EXPECT_NEAR(t.predict_allgather_s(Algorithm::rabenseifner, 3 * kMiB, 6, 1), hd_ag, 1e-12 * hd_ag);
  // 8 ranks (no fold): lg 8 = 3 latency terms, the ring's byte terms.
  const double hd8 = 3 * a + 7.0 / 8 * n * b + 7.0 / 8 * n * g;
  EXPECT_NEAR(t.predict_reduce_scatter_s(Algorithm::rabenseifner, 3 * kMiB, 8, 8), hd8, 1e-12 * hd8);
  EXPECT_TRUE(std::isinf(t.predict_reduce_scatter_s(Algorithm::tree, 4096, 8, 8)));
  EXPECT_TRUE(std::isinf(t.predict_allgather_s(Algorithm::hierarchical, 4096, 8, 8)));  // one node
  // The ring / halving choice on its own (shm's: ShmReduceScatterAndAllgather).
  t.auto_algorithms = hpctrain::coll::parse_auto_algorithms("ring,rabenseifner", "test");
  // Latency-bound: halving / doubling from 6 ranks (at 2 ranks both are one exchange: a tie,
  // to the ring; at 3 and 5 the ring's 2 and 4 steps match lg p' + the fold's 2 and the fold's
  // bytes decide); 64 MiB at 6 ranks: the fold's 2n bytes lose.
  for (int ranks : {2, 3, 5}) EXPECT_EQ(t.choose_reduce_scatter(1024, ranks, ranks), Algorithm::ring) << ranks;
  for (int ranks : {6, 7, 8, 16}) {
    EXPECT_EQ(t.choose_reduce_scatter(1024, ranks, ranks), Algorithm::rabenseifner) << ranks;
    EXPECT_EQ(t.choose_allgather(1024, ranks, ranks), Algorithm::rabenseifner) << ranks;
  }
  EXPECT_EQ(t.choose_reduce_scatter(64 * kMiB, 6, 6), Algorithm::ring);
  EXPECT_EQ(t.choose_allgather(64 * kMiB, 6, 6), Algorithm::ring);
  // The choice is the smaller prediction, at every size and P tried.
  for (std::size_t bytes : {std::size_t{8}, std::size_t{4096}, kMiB, 64 * kMiB})
    for (int ranks : {2, 3, 5, 8, 12}) {
      const Algorithm rs = t.choose_reduce_scatter(bytes, ranks, ranks);
      const Algorithm other = rs == Algorithm::ring ? Algorithm::rabenseifner : Algorithm::ring;
      EXPECT_LE(t.predict_reduce_scatter_s(rs, bytes, ranks, ranks), t.predict_reduce_scatter_s(other, bytes, ranks, ranks));
    }
  // Restricting auto to the ring keeps the ring; a forced all-reduce algorithm does not apply.
  t.allreduce_algorithm = Algorithm::tree;
  EXPECT_EQ(t.choose_reduce_scatter(1024, 8, 8), Algorithm::rabenseifner);
  t.auto_algorithms = hpctrain::coll::parse_auto_algorithms("ring,tree", "test");
  EXPECT_EQ(t.choose_reduce_scatter(1024, 8, 8), Algorithm::ring);
  EXPECT_EQ(t.choose_allgather(1024, 8, 8), Algorithm::ring);
}

// Hierarchical reduce-scatter / all-gather (tuning.hpp's formulas, recomputed here): the shm
// step over a node's k ranks, then the better of ring and halving for the part (n/k bytes) over
// the N nodes with β_inter·k; +infinity on one node, nodes of one rank, or unequal nodes; auto
// takes it where the network is slow against shared memory, and not when auto_algorithms
// leaves it out.
TEST(CostModel, HierarchicalReduceScatterAndAllgather) {
  const double a = 3e-6, b = 2e-10, ai = 7e-6, bi = 5e-10, g = 3e-10, sb = 1e-10, ss = 2e-6;
  Tuning t = Tuning::from_file(write_file("hier_scatter.json", model_file(a, b, ai, bi, g, sb, ss)));
  // 12 ranks in 3 nodes of 4, 12 MiB: shm steps of 1 MiB (12 for the reduce-scatter, 3 for the
  // all-gather's 3 MiB part); the inter ring over 3 nodes moves 1 MiB chunks in one segment.
  const double n = 12.0 * kMiB, part = n / 4, chunk = part / 3;
  const double across_rs = 2 * ai + 2 * chunk * 4 * bi + 2 * chunk * g;
  const double halving_rs = ai + part / 2 * 4 * bi + part / 2 * g + 2 * ai + (part + part / 3) * 4 * bi + part * g;
  ASSERT_LT(across_rs, halving_rs);  // the ring is the better inter step here
  const double rs = 12 * ss + n * sb + 3.0 / 4 * n * g + across_rs;
  const double ag = 3 * ss + n * sb + (2 * ai + 2 * chunk * 4 * bi) + part * sb;
  EXPECT_NEAR(t.predict_reduce_scatter_s(Algorithm::hierarchical, 12 * kMiB, 12, 4), rs, 1e-12 * rs);
  EXPECT_NEAR(t.predict_allgather_s(Algorithm::hierarchical, 12 * kMiB, 12, 4), ag, 1e-12 * ag);
  // 8 KiB over 8 nodes of 2: the halving (3 exchanges) beats the ring's 7 steps between nodes.
  const double small = 8192, small_part = small / 2;
  const double small_rs = 1 * ss + small * sb + 0.5 * small * g +
                          (3 * ai + 7.0 / 8 * small_part * 2 * bi + 7.0 / 8 * small_part * g);
  EXPECT_NEAR(t.predict_reduce_scatter_s(Algorithm::hierarchical, 8192, 16, 2), small_rs, 1e-12 * small_rs);
  for (auto [ranks, per_node] : {std::pair{12, 12}, std::pair{12, 1}, std::pair{12, 5}, std::pair{6, 4}}) {
    EXPECT_TRUE(std::isinf(t.predict_reduce_scatter_s(Algorithm::hierarchical, kMiB, ranks, per_node))) << ranks << "/" << per_node;
    EXPECT_TRUE(std::isinf(t.predict_allgather_s(Algorithm::hierarchical, kMiB, ranks, per_node))) << ranks << "/" << per_node;
  }
  // A network 16x slower than shared memory: hierarchical for large vectors over 4 nodes of 2
  // (its inter step moves (N-1)/N of the vector per node's link, the flat ring (p-1)/p over every
  // rank's, and it reduces half the vector through shared memory); not without it in auto.
  Tuning slow = Tuning::from_file(write_file("hier_slow.json", model_file(a, b, ai, 16 * sb, g, sb, ss)));
  EXPECT_EQ(slow.choose_reduce_scatter(64 * kMiB, 8, 2), Algorithm::hierarchical);
  EXPECT_EQ(slow.choose_allgather(64 * kMiB, 8, 2), Algorithm::hierarchical);
  EXPECT_NE(slow.choose_reduce_scatter(64 * kMiB, 6, 4), Algorithm::hierarchical);  // unequal nodes
  for (const Tuning* m : {static_cast<const Tuning*>(&t), static_cast<const Tuning*>(&slow)})
    for (std::size_t bytes : {std::size_t{8}, std::size_t{4096}, kMiB, 64 * kMiB})
      for (const std::pair<int, int> layout : {std::pair{4, 2}, std::pair{8, 2}, std::pair{12, 4}, std::pair{6, 3}, std::pair{6, 4}})
        for (bool reduce : {true, false}) {
          const int ranks = layout.first, per_node = layout.second;  // not a structured binding: captured below (C++17)
          auto predict = [&](Algorithm x) {
            return reduce ? m->predict_reduce_scatter_s(x, bytes, ranks, per_node)
                          : m->predict_allgather_s(x, bytes, ranks, per_node);
          };
          const Algorithm chosen =
              reduce ? m->choose_reduce_scatter(bytes, ranks, per_node) : m->choose_allgather(bytes, ranks, per_node);
          for (Algorithm x : {Algorithm::ring, Algorithm::rabenseifner, Algorithm::shm, Algorithm::hierarchical})
            EXPECT_LE(predict(chosen), predict(x)) << bytes << " " << ranks << "/" << per_node << " " << reduce;
        }
  slow.auto_algorithms = hpctrain::coll::parse_auto_algorithms("ring,rabenseifner,shm", "test");
  EXPECT_NE(slow.choose_reduce_scatter(64 * kMiB, 8, 2), Algorithm::hierarchical);
  EXPECT_NE(slow.choose_allgather(64 * kMiB, 8, 2), Algorithm::hierarchical);
}

// shm reduce-scatter / all-gather (tuning.hpp's formulas, recomputed here): one flag wait per
// staging step, the whole input staged for the reduce-scatter and the own block for the
// all-gather; only on one node; auto takes it where it is the cheapest of the three, and not
// when auto_algorithms leaves it out.
TEST(CostModel, ShmReduceScatterAndAllgather) {
  const double a = 3e-6, b = 2e-10, ai = 7e-6, bi = 5e-10, g = 3e-10, sb = 1e-10, ss = 2e-6;
  Tuning t = Tuning::from_file(write_file("shm_scatter.json", model_file(a, b, ai, bi, g, sb, ss)));
  const double n = 3.0 * kMiB, p = 6;  // 1 MiB staging segments (the default): 3 reduce-scatter steps
  const double rs = 3 * ss + n * sb + (p - 1) / p * n * g;
  const double ag = 1 * ss + n * sb;  // the own 512 KiB block: one step
  EXPECT_NEAR(t.predict_reduce_scatter_s(Algorithm::shm, 3 * kMiB, 6, 6), rs, 1e-12 * rs);
  EXPECT_NEAR(t.predict_allgather_s(Algorithm::shm, 3 * kMiB, 6, 6), ag, 1e-12 * ag);
  EXPECT_NEAR(t.predict_allgather_s(Algorithm::shm, 3 * kMiB, 6, 0), ag, 1e-12 * ag);  // 0: one node
  EXPECT_TRUE(std::isinf(t.predict_reduce_scatter_s(Algorithm::shm, 3 * kMiB, 6, 3)));
  EXPECT_TRUE(std::isinf(t.predict_allgather_s(Algorithm::shm, 3 * kMiB, 6, 1)));
  // Copies at 10 GB/s against 2 GB/s point-to-point: shm on one node, never across nodes.
  const Tuning fast = Tuning::from_file(write_file("shm_fast.json", model_file(2e-6, 5e-10, 2e-6, 5e-10, 1e-10, 1e-10, 1e-6)));
  for (int ranks : {2, 4, 8}) {
    EXPECT_EQ(fast.choose_reduce_scatter(64 * kMiB, ranks, ranks), Algorithm::shm) << ranks;
    EXPECT_EQ(fast.choose_allgather(64 * kMiB, ranks, ranks), Algorithm::shm) << ranks;
    EXPECT_NE(fast.choose_reduce_scatter(64 * kMiB, ranks, 1), Algorithm::shm) << ranks;
    EXPECT_NE(fast.choose_allgather(64 * kMiB, ranks, ranks / 2), Algorithm::shm) << ranks;
  }
  // The choice is the smallest of the three predictions, at every size and P tried.
  for (const Tuning* m : {static_cast<const Tuning*>(&t), &fast})
    for (std::size_t bytes : {std::size_t{8}, std::size_t{4096}, kMiB, 64 * kMiB})
      for (int ranks : {2, 3, 5, 8, 12})
        for (bool reduce : {true, false}) {
          auto predict = [&](Algorithm x) {
            return reduce ? m->predict_reduce_scatter_s(x, bytes, ranks, ranks) : m->predict_allgather_s(x, bytes, ranks, ranks);
          };
          const Algorithm chosen = reduce ? m->choose_reduce_scatter(bytes, ranks, ranks) : m->choose_allgather(bytes, ranks, ranks);
          for (Algorithm x : {Algorithm::ring, Algorithm::rabenseifner, Algorithm::shm})
            EXPECT_LE(predict(chosen), predict(x)) << bytes << " " << ranks << " " << reduce;
        }
  // Left out of auto_algorithms (as under SMPI), shm is never chosen.
  Tuning restricted = fast;
  restricted.auto_algorithms = hpctrain::coll::parse_auto_algorithms("ring,rabenseifner", "test");
  EXPECT_NE(restricted.choose_reduce_scatter(64 * kMiB, 4, 4), Algorithm::shm);
  EXPECT_NE(restricted.choose_allgather(64 * kMiB, 4, 4), Algorithm::shm);
}

TEST(CostModel, ExplicitAlgorithmAndRestrictionsWin) {
  // Only what this test sets counts (not the caller's environment).
  for (const char* v : {"HPCTRAIN_ALLREDUCE_ALGO", "HPCTRAIN_AUTO_ALGOS", "HPCTRAIN_RING_SEGMENT_BYTES",
                        "HPCTRAIN_AUTO_TREE_MAX_BYTES"}) {
    ::unsetenv(v);
  }
  const std::string path = write_file("env.json", R"({"schema_version": 1,
      "model": {"alpha_intra_s": 1e-5, "shm_sync_s": 1e-3},
      "knobs": {"ring_segment_bytes": 8192, "auto_algorithms": ["ring", "tree", "recursive_doubling"]}})");
  {
    EnvGuard file("HPCTRAIN_TUNING_FILE", path);
    const Tuning t = Tuning::from_environment();
    EXPECT_EQ(t.tuning_file, path);
    EXPECT_EQ(t.ring_segment_bytes, 8192u);
    EXPECT_EQ(t.choose_allreduce(8, 8, 8), Algorithm::recursive_doubling);
    {
      EnvGuard algo("HPCTRAIN_ALLREDUCE_ALGO", "ring");
      EXPECT_EQ(Tuning::from_environment().choose_allreduce(8, 8, 8), Algorithm::ring);
    }
    {
      EnvGuard only("HPCTRAIN_AUTO_ALGOS", "ring,tree");
      EnvGuard seg("HPCTRAIN_RING_SEGMENT_BYTES", "64K");  // the environment wins over the file
      const Tuning e = Tuning::from_environment();
      EXPECT_EQ(e.ring_segment_bytes, 65536u);
      EXPECT_EQ(e.choose_allreduce(8, 8, 8), Algorithm::tree);
    }
    for (const char* vendor : {"ring,mpi", "nccl"}) {  // the pass-throughs are not modelled
      EnvGuard bad("HPCTRAIN_AUTO_ALGOS", vendor);
      EXPECT_THROW((void)Tuning::from_environment(), hpctrain::Error) << vendor;
    }
    {
      EnvGuard algo("HPCTRAIN_ALLREDUCE_ALGO", "nccl");  // explicit: honoured (refused at the call if it cannot run)
      EXPECT_EQ(Tuning::from_environment().choose_allreduce(8, 8, 8), Algorithm::nccl);
    }
    {
      EnvGuard gone("HPCTRAIN_AUTO_TREE_MAX_BYTES", "64K");
      EXPECT_THROW((void)Tuning::from_environment(), hpctrain::Error);
    }
  }
}

TEST(CostModel, CalibrationScalesTheByteTermsOnly) {
  // Ring over 2 ranks on one node: 2α per segment, n·β + n/2·γ byte terms. Scale 2 at 64 KiB and
  // below, 0.5 at 4 MiB and above, linear in lg n between (512 KiB is 3 of the 6 doublings:
  // 1.25); tree has no list, so scale 1.
  const double a = 1e-6, b = 1e-10, g = 2e-10;
  std::string text = model_file(a, b, a, b, g, 1e-10, 1e-6);
  text.insert(text.size() - 2, R"(, "calibration": {"bytes": [65536, 4194304], "scale": {"ring": [2.0, 0.5]}})");
  const Tuning t = Tuning::from_file(write_file("calibrated.json", text));
  auto ring = [&](double n, double scale) {
    const double segments = std::max(1.0, std::ceil(n / 2 / kMiB));  // of the 1 MiB default
    return 2 * segments * a + scale * (n * b + n / 2 * g);
  };
  for (auto [bytes, scale] : {std::pair<std::size_t, double>{8, 2.0}, {65536, 2.0}, {512 * 1024, 2.0 - 1.5 * 3.0 / 6.0},
                              {4 * kMiB, 0.5}, {64 * kMiB, 0.5}}) {
    const double want = ring(static_cast<double>(bytes), scale);
    EXPECT_NEAR(t.predict_allreduce_s(Algorithm::ring, bytes, 2, 2), want, 1e-12 * want) << bytes;
  }
  // An algorithm without a list keeps the formula.
  const Tuning plain = Tuning::from_file(write_file("plain.json", model_file(a, b, a, b, g, 1e-10, 1e-6)));
  EXPECT_EQ(t.predict_allreduce_s(Algorithm::tree, kMiB, 2, 2), plain.predict_allreduce_s(Algorithm::tree, kMiB, 2, 2));
  // Saved and read back alike.
  const std::string path = write_file("calibrated-round.json", "");
  t.save(path);
  EXPECT_EQ(Tuning::from_file(path).predict_allreduce_s(Algorithm::ring, kMiB, 2, 2),
            t.predict_allreduce_s(Algorithm::ring, kMiB, 2, 2));
  // Malformed calibrations name the key.
  expect_error(write_file("cal1.json", R"({"schema_version": 1, "model": {"calibration": {"bytes": [4096, 1024], "scale": {}}}})"),
               "model.calibration.bytes");
  expect_error(write_file("cal2.json", R"({"schema_version": 1, "model": {"calibration": {"bytes": [4096], "scale": {"ring": [1, 2]}}}})"),
               "model.calibration.scale.ring");
  expect_error(write_file("cal3.json", R"({"schema_version": 1, "model": {"calibration": {"bytes": [4096], "scale": {"ring": [0]}}}})"),
               "model.calibration.scale.ring");
}

TEST(TuningFile, RoundTrip) {
  Tuning t;
  t.model.alpha_intra_s = 1.25e-6;
  t.model.beta_inter_s_per_byte = 3.5e-10;
  t.model.overhead_s[static_cast<std::size_t>(Algorithm::shm)] = 4e-6;
  t.model.alpha_far_s = 4.5e-6;
  t.model.nodes_per_switch = 32;
  t.model.eager_bytes = 12288;
  t.model.far_beta_scale = 3.5;
  t.ring_window = 7;
  t.auto_algorithms = hpctrain::coll::parse_auto_algorithms("ring,shm", "test");
  const std::string path = write_file("round.json", "");
  t.save(path, R"({"ranks": 2})");
  const Tuning r = Tuning::from_file(path);
  EXPECT_EQ(r.model.alpha_intra_s, t.model.alpha_intra_s);
  EXPECT_EQ(r.model.beta_inter_s_per_byte, t.model.beta_inter_s_per_byte);
  EXPECT_EQ(r.model.overhead_s[static_cast<std::size_t>(Algorithm::shm)], 4e-6);
  EXPECT_EQ(r.model.alpha_far_s, 4.5e-6);
  EXPECT_EQ(r.model.nodes_per_switch, 32u);
  EXPECT_EQ(r.model.eager_bytes, 12288u);
  EXPECT_EQ(r.model.far_beta_scale, 3.5);
  EXPECT_EQ(r.ring_window, 7u);
  EXPECT_EQ(r.auto_algorithms, t.auto_algorithms);
  for (std::size_t bytes : {std::size_t{8}, kMiB, 64 * kMiB}) {
    EXPECT_EQ(r.predict_allreduce_s(Algorithm::ring, bytes, 4, 2), t.predict_allreduce_s(Algorithm::ring, bytes, 4, 2));
  }
}

TEST(TuningFile, MalformedFilesNameFileAndKey) {
  expect_error(write_file("nope-dir/missing.json", "").append("-absent"), "cannot be read");
  expect_error(write_file("notjson.json", "{\"schema_version\": 1,"), "not valid JSON");
  expect_error(write_file("noversion.json", R"({"model": {}})"), "schema_version");
  expect_error(write_file("version2.json", R"({"schema_version": 2})"), "schema_version");
  expect_error(write_file("unknown.json", R"({"schema_version": 1, "modle": {}})"), "modle");
  expect_error(write_file("unknownparam.json", R"({"schema_version": 1, "model": {"alpha_s": 1e-6}})"), "model.alpha_s");
  expect_error(write_file("negative.json", R"({"schema_version": 1, "model": {"gamma_s_per_byte": -1}})"),
               "model.gamma_s_per_byte");
  expect_error(write_file("string.json", R"({"schema_version": 1, "model": {"shm_sync_s": "fast"}})"), "model.shm_sync_s");
  expect_error(write_file("switch.json", R"({"schema_version": 1, "model": {"nodes_per_switch": 1.5}})"),
               "model.nodes_per_switch");
  expect_error(write_file("switch2.json", R"({"schema_version": 1, "model": {"nodes_per_switch": -2}})"),
               "model.nodes_per_switch");
  expect_error(write_file("far.json", R"({"schema_version": 1, "model": {"alpha_far_s": -1e-6}})"), "model.alpha_far_s");
  expect_error(write_file("knob.json", R"({"schema_version": 1, "knobs": {"ring_segment_bytes": 16}})"),
               "knobs.ring_segment_bytes");
  expect_error(write_file("knobname.json", R"({"schema_version": 1, "knobs": {"ring_segments": 16}})"), "knobs.ring_segments");
  expect_error(write_file("algo.json", R"({"schema_version": 1, "knobs": {"auto_algorithms": ["ring", "mpi"]}})"),
               "knobs.auto_algorithms");
  expect_error(write_file("overhead.json", R"({"schema_version": 1, "model": {"overhead_s": {"rign": 0}}})"),
               "model.overhead_s.rign");
  // Through the environment variable, too.
  ::unsetenv("HPCTRAIN_AUTO_TREE_MAX_BYTES");
  EnvGuard file("HPCTRAIN_TUNING_FILE", write_file("env-bad.json", R"({"schema_version": 1, "extra": 1})"));
  try {
    (void)Tuning::from_environment();
    ADD_FAILURE() << "no error";
  } catch (const hpctrain::Error& e) {
    EXPECT_NE(std::string(e.what()).find("extra"), std::string::npos) << e.what();
  }
}

}  // namespace
