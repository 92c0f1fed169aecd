// UCX-specific behaviour (the full algorithm matrix over UCX is mpi_test.cpp compiled with
// HPCTRAIN_TEST_TRANSPORT_UCX): communicators that must not cross-talk, transport selection by
// environment, and a peer that goes away mid-job.

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "hpctrain/base/error.hpp"
#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/collectives/transport_factory.hpp"
#include "hpctrain/collectives/ucx_transport.hpp"

namespace hpctrain::coll {
namespace {

Tuning test_tuning() {
  Tuning t;
  t.timeout_s = 60;
  t.ring_segment_bytes = 16 << 10;  // many messages in flight per collective
  t.tree_segment_bytes = 16 << 10;
  return t;
}

Communicator ucx_world(const Tuning& t = test_tuning()) {
  return Communicator(make_ucx_transport(MPI_COMM_WORLD, t), t);
}

// Two communicators over the same ranks whose collectives use the same sequence numbers (hence
// the same tags), one with the ranks in reverse order, run non-blocking collectives at the same
// time on their own progress threads. Any message crossing from one to the other would land at
// the wrong position or with the other's values.
TEST(UcxTransport, SplitCommunicatorsRunConcurrentlyWithoutCrossTalk) {
  Communicator world = ucx_world();
  const int p = world.size(), r = world.rank();
  Communicator forward = world.split(0, r);
  Communicator backward = world.split(0, p - 1 - r);
  ASSERT_EQ(forward.transport().name(), "ucx");
  ASSERT_EQ(backward.rank(), p - 1 - r);

  const std::size_t counts[] = {1, 7, 4099, 100003};
  const Algorithm algos[] = {Algorithm::ring, Algorithm::tree, Algorithm::automatic, Algorithm::ring};
  std::vector<std::vector<double>> fwd, bwd;
  std::vector<Work> work;
  for (int round = 0; round < 3; ++round) {
    for (std::size_t k = 0; k < 4; ++k) {
      // Element i on rank q: forward gets q + 1 + i, backward 1000 * (position + 1).
      fwd.emplace_back(counts[k]);
      bwd.emplace_back(counts[k]);
      for (std::size_t i = 0; i < counts[k]; ++i) {
        fwd.back()[i] = r + 1 + static_cast<double>(i % 13);
        bwd.back()[i] = 1000.0 * (backward.rank() + 1);
      }
    }
  }
  std::size_t b = 0;
  for (int round = 0; round < 3; ++round) {
    for (std::size_t k = 0; k < 4; ++k, ++b) {
      work.push_back(forward.iallreduce(fwd[b].data(), fwd[b].size(), ReduceOp::sum, algos[k]));
      work.push_back(backward.iallreduce(bwd[b].data(), bwd[b].size(), ReduceOp::max, algos[3 - k]));
    }
  }
  for (auto& w : work) w.wait();
  const double rank_sum = p * (p + 1) / 2.0;
  for (std::size_t j = 0; j < fwd.size(); ++j) {
    std::size_t bad_f = 0, bad_b = 0;
    for (std::size_t i = 0; i < fwd[j].size(); ++i) {
      bad_f += fwd[j][i] != rank_sum + p * static_cast<double>(i % 13);
      bad_b += bwd[j][i] != 1000.0 * p;
    }
    EXPECT_EQ(bad_f, 0u) << "forward buffer " << j;
    EXPECT_EQ(bad_b, 0u) << "backward buffer " << j;
  }
}

TEST(UcxTransport, SelectedByEnvironment) {
  ::setenv("HPCTRAIN_TRANSPORT", "ucx", 1);
  auto ucx = make_default_transport(MPI_COMM_WORLD);
  ::setenv("HPCTRAIN_TRANSPORT", "mpi", 1);
  auto mpi = make_default_transport(MPI_COMM_WORLD);
  ::setenv("HPCTRAIN_TRANSPORT", "verbs", 1);
  EXPECT_THROW(make_default_transport(MPI_COMM_WORLD), Error);
  ::unsetenv("HPCTRAIN_TRANSPORT");
  EXPECT_EQ(ucx->name(), "ucx");
  EXPECT_EQ(mpi->name(), "mpi");
  EXPECT_TRUE(ucx_transport_available());
}

// Self-sends go through UCX's `self` transport.
TEST(UcxTransport, SendToSelf) {
  auto t = make_ucx_transport(MPI_COMM_WORLD, test_tuning());
  std::vector<int> out(1000), in(1000, -1);
  for (int i = 0; i < 1000; ++i) out[static_cast<std::size_t>(i)] = i * 3;
  Request reqs[2] = {t->irecv(in.data(), in.size() * sizeof(int), t->rank(), 5),
                     t->isend(out.data(), out.size() * sizeof(int), t->rank(), 5)};
  WaitPolicy policy;
  policy.timeout = std::chrono::seconds(30);
  wait_all(*t, reqs, 2, policy);
  EXPECT_EQ(in, out);
}

// A message that has already arrived when its receive is posted (a small send to oneself is
// delivered inside the send). UCX 1.13.1 would complete such a receive at once and report its
// length as 0, so the transport must not let it (UCP_OP_ATTR_FLAG_NO_IMM_CMPL): the length
// and the data must both be right.
TEST(UcxTransport, ArrivedMessageIsReceivedWithItsData) {
  auto t = make_ucx_transport(MPI_COMM_WORLD, test_tuning());
  std::vector<int> out{3, 1, 4, 1, 5, 9, 2, 6}, in(8, -1);
  WaitPolicy policy;
  policy.timeout = std::chrono::seconds(30);
  Request send = t->isend(out.data(), out.size() * sizeof(int), t->rank(), 11);
  wait_all(*t, &send, 1, policy);
  Request recv = t->irecv(in.data(), in.size() * sizeof(int), t->rank(), 11);
  wait_all(*t, &recv, 1, policy);
  EXPECT_EQ(in, out);
}

// The same with a message shorter than the posted receive: an error naming both lengths (with
// immediate completion UCX 1.13.1 reported "got 0").
TEST(UcxTransport, ArrivedShorterMessageIsAnError) {
  auto t = make_ucx_transport(MPI_COMM_WORLD, test_tuning());
  std::vector<char> small(10, 'x'), big(20);
  WaitPolicy policy;
  policy.timeout = std::chrono::seconds(30);
  Request send = t->isend(small.data(), small.size(), t->rank(), 12);
  wait_all(*t, &send, 1, policy);
  try {
    Request recv = t->irecv(big.data(), big.size(), t->rank(), 12);
    wait_all(*t, &recv, 1, policy);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected 20 bytes, got 10"), std::string::npos) << e.what();
  }
}

// A receive whose message is shorter than posted is an error naming the peer, not a silent
// partial buffer.
TEST(UcxTransport, LengthMismatchIsAnError) {
  auto t = make_ucx_transport(MPI_COMM_WORLD, test_tuning());
  std::vector<char> small(10, 'x'), big(20);
  Request reqs[2] = {t->irecv(big.data(), big.size(), t->rank(), 9), t->isend(small.data(), small.size(), t->rank(), 9)};
  WaitPolicy policy;
  policy.timeout = std::chrono::seconds(30);
  try {
    wait_all(*t, reqs, 2, policy);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected 20 bytes, got 10"), std::string::npos) << e.what();
  }
}

// Rank 1 tears its transport down; rank 0 then starts an all-reduce with it. Rank 0 must get an
// error naming rank 1 (UCX's peer failure, or at worst our timeout), not hang.
TEST(UcxTransport, PeerGoneGivesAnErrorNamingIt) {
  int p = 0, r = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  if (p != 2) GTEST_SKIP() << "two ranks only";
  Tuning t = test_tuning();
  t.timeout_s = 3;
  t.ucx_close_timeout_s = 1;
  // Peer failure reporting where the transport has it (tcp); over sm our timeout names the peer.
  const char* tls = std::getenv("UCX_TLS");
  t.ucx_peer_errors = tls && std::string(tls).find("tcp") != std::string::npos;
  auto comm = std::make_unique<Communicator>(make_ucx_transport(MPI_COMM_WORLD, t), t);
  std::vector<float> v(1 << 18, 1.0f);
  comm->allreduce(v.data(), v.size(), ReduceOp::sum, Algorithm::ring);  // endpoints exist
  if (r == 1) comm.reset();
  MPI_Barrier(MPI_COMM_WORLD);
  if (r == 0) {
    const auto start = std::chrono::steady_clock::now();
    try {
      comm->allreduce(v.data(), v.size(), ReduceOp::sum, Algorithm::ring);
      ADD_FAILURE() << "all-reduce with a departed peer succeeded";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
      std::printf("rank 0 got, after %.2f s: %s\n",
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), e.what());
    }
    comm.reset();
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
}  // namespace hpctrain::coll
