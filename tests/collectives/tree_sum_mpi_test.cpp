// TreeSum over real processes, on the transport HPCTRAIN_TRANSPORT selects (mpi and, when
// built, ucx) at np 1..4: every split of the terms over the ranks gives every rank the bits of
// the fixed tree evaluated serially by one process, and the same bits as rank 0.

#include <gtest/gtest.h>
#include <mpi.h>

#include <vector>

#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/collectives/transport_factory.hpp"
#include "hpctrain/collectives/tree_sum.hpp"
#include "tree_sum_terms.hpp"

namespace hpctrain::coll {
namespace {

using namespace testing;

TEST(TreeSumMpi, SameBitsAsTheSerialTree) {
  Communicator comm(make_default_transport(MPI_COMM_WORLD));
  for (std::size_t count : {std::size_t{3}, std::size_t{20000}}) {
    for (std::int64_t total : {1, 6, 16, 37}) {
      std::vector<std::vector<float>> terms;
      for (std::int64_t t = 0; t < total; ++t) terms.push_back(tree_term(t, count));
      const auto expected = serial_tree_sum(terms);
      for (Split split : {Split::contiguous, Split::round_robin, Split::skewed}) {
        TreeSum sum(count);
        const auto got = tree_sum_on(comm, sum, total, split_terms(total, comm.size(), split), split == Split::skewed);
        EXPECT_TRUE(same_float_bits(got, expected))
            << "K=" << total << " count=" << count << " split=" << static_cast<int>(split) << " over "
            << comm.transport().name() << " at P=" << comm.size() << ", rank " << comm.rank();
        std::vector<float> rank0 = got;
        comm.broadcast(rank0.data(), rank0.size(), DataType::f32, 0);
        EXPECT_TRUE(same_float_bits(got, rank0)) << "rank " << comm.rank() << " differs from rank 0";
      }
    }
  }
}

}  // namespace
}  // namespace hpctrain::coll
