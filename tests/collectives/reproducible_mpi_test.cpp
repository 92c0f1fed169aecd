// The reproducible sum over real processes, on the transport HPCTRAIN_TRANSPORT selects (the
// test is registered for mpi and, when built, ucx) at np 1..4: the K = 16 terms of
// reproducible_terms.hpp split over the ranks give, with every algorithm, the same bits as the
// same terms summed by one rank alone (a loopback communicator of size 1 inside this process).

#include <gtest/gtest.h>
#include <mpi.h>

#include <vector>

#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/collectives/loopback_transport.hpp"
#include "hpctrain/collectives/reproducible_sum.hpp"
#include "hpctrain/collectives/transport_factory.hpp"
#include "reproducible_terms.hpp"

namespace hpctrain::coll {
namespace {

using namespace testing;


template <class T>
void check() {
  Communicator alone(std::move(make_loopback_group(1)[0]));
  const std::vector<T> expected = sum_on<T>(alone, Algorithm::ring);
  Communicator comm(make_default_transport(MPI_COMM_WORLD));
  const bool vendor = comm.transport().name() == "mpi";
  for (Algorithm algo : reproducible_algorithms(vendor)) {
    const auto got = sum_on<T>(comm, algo);
    EXPECT_TRUE(same_bits(got, expected)) << "algorithm " << to_string(algo) << " over "
                                          << comm.transport().name() << " at P=" << comm.size();
  }
  // The single-term call: every algorithm agrees bit for bit on every rank.
  const auto x = make_term<T>(comm.rank());
  std::vector<T> first;
  for (Algorithm algo : reproducible_algorithms(vendor)) {
    std::vector<T> y(kCount);
    comm.allreduce_reproducible(x.data(), y.data(), kCount, algo, kBlock);
    if (first.empty()) first = y;
    EXPECT_TRUE(same_bits(y, first)) << "algorithm " << to_string(algo);
    std::vector<T> rank0 = y;
    comm.broadcast(rank0.data(), rank0.size(), data_type_v<T>, 0);
    EXPECT_TRUE(same_bits(y, rank0)) << "rank " << comm.rank() << " differs from rank 0";
  }
}

TEST(ReproducibleSumMpi, FloatSameBitsAsOneRank) { check<float>(); }
TEST(ReproducibleSumMpi, DoubleSameBitsAsOneRank) { check<double>(); }

}  // namespace
}  // namespace hpctrain::coll
