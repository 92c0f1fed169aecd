// DataParallel's contract on a ParameterBuffers view that no Sequential owns: after finish()
// every rank's gradient buffer is the SUM over ranks (not the mean) of every element, whichever
// buckets the hook launched and whichever finish() launched; parameters change only through
// broadcast_parameters(), which gives every rank rank 0's values.

#include <gtest/gtest.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/collectives/mpi_transport.hpp"
#include "hpctrain/core/tensor.hpp"
#include "hpctrain/train/data_parallel.hpp"

using namespace hpctrain;

namespace {

class KokkosEnvironment : public ::testing::Environment {
 public:
  void SetUp() override { Kokkos::initialize(); }
  void TearDown() override { Kokkos::finalize(); }
};
const auto* kokkos_env = ::testing::AddGlobalTestEnvironment(new KokkosEnvironment);

/// Three tensors of two "layers" (1001, 7 and 4096 floats) in one pair of buffers.
train::ParameterBuffers make_buffers() {
  train::ParameterBuffers b;
  b.tensors = {{"0.a", 0, 1001, {1001}, 0}, {"0.b", 1001, 7, {7}, 0}, {"1.c", 1008, 4096, {64, 64}, 1}};
  b.parameters = core::Vec<float>("test::params", 1008 + 4096);
  b.gradients = core::Vec<float>("test::grads", 1008 + 4096);
  return b;
}

float grad_of(int rank, std::size_t i) { return static_cast<float>((rank + 1) * (static_cast<int>(i % 13) + 1)); }

TEST(DataParallel, SumsGradientsOverRanksOnABufferView) {
  coll::Communicator comm(coll::make_mpi_transport(MPI_COMM_WORLD));
  const int p = comm.size(), r = comm.rank();
  train::ParameterBuffers buffers = make_buffers();
  train::DataParallelOptions options;
  options.first_bucket_bytes = 4096;  // several buckets: 1.c alone, then 0.b + 0.a
  options.bucket_bytes = 1024;
  train::DataParallel dp(comm, buffers, options);
  ASSERT_GE(dp.buckets().size(), 2u);

  std::vector<float> host(static_cast<std::size_t>(buffers.count()));
  for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(r * 1000 + static_cast<int>(i));
  core::from_host(buffers.parameters, host);
  dp.broadcast_parameters();
  const std::vector<float> params = core::to_host(buffers.parameters);
  for (std::size_t i = 0; i < params.size(); ++i) ASSERT_EQ(params[i], static_cast<float>(i)) << "element " << i;

  for (std::size_t i = 0; i < host.size(); ++i) host[i] = grad_of(r, i);
  core::from_host(buffers.gradients, host);
  dp.begin_step(/*sync=*/true);
  dp.backward_hook()(1);  // layer 1's gradients are final: its bucket goes; finish() sends the rest
  dp.finish();
  const std::vector<float> summed = core::to_host(buffers.gradients);
  const float ranks_sum = static_cast<float>(p * (p + 1) / 2);
  for (std::size_t i = 0; i < summed.size(); ++i) {
    ASSERT_EQ(summed[i], ranks_sum * static_cast<float>(i % 13 + 1)) << "element " << i << " at P = " << p;
  }
  EXPECT_EQ(core::to_host(buffers.parameters), params);  // finish() never touches parameters
}

TEST(DataParallel, AccumulationStepsDoNotCommunicate) {
  coll::Communicator comm(coll::make_mpi_transport(MPI_COMM_WORLD));
  train::ParameterBuffers buffers = make_buffers();
  train::DataParallel dp(comm, buffers);
  std::vector<float> host(static_cast<std::size_t>(buffers.count()), static_cast<float>(comm.rank() + 1));
  core::from_host(buffers.gradients, host);
  dp.begin_step(/*sync=*/false);
  dp.backward_hook()(0);
  EXPECT_EQ(dp.finish(), 0.0);
  EXPECT_EQ(core::to_host(buffers.gradients), host);  // this rank's own gradient, unchanged
}

// Error feedback (--grad-error-feedback) on a 16-bit wire: what a rank has sent over K steps sums
// to what it computed, up to one rounding. Rank 0 sends g_i = 1 + k·u/8 (u = the wire type's
// ulp at 1, k = 1..7: most round away) and every other rank zeros, so every addition inside the
// reduction is exact and each step's result is rank 0's cast value at any P. With feedback the
// K results sum to K·g_i within half an ulp; without it they lose K·|g_i − cast(g_i)| (up to
// K·u/2), which the same bound must catch.
TEST(DataParallel, ErrorFeedbackSendsWhatWasComputed) {
  coll::Communicator comm(coll::make_mpi_transport(MPI_COMM_WORLD));
  constexpr int kSteps = 64;
  for (const coll::DataType type : {coll::DataType::bf16, coll::DataType::f16}) {
    const double ulp = type == coll::DataType::bf16 ? 1.0 / 128 : 1.0 / 1024;
    std::size_t feedback_bad = 0, plain_bad = 0;
    for (const bool feedback : {true, false}) {
      train::ParameterBuffers buffers = make_buffers();
      train::DataParallelOptions options;
      options.first_bucket_bytes = 4096;
      options.bucket_bytes = 1024;
      options.wire_type = type;
      options.error_feedback = feedback;
      train::DataParallel dp(comm, buffers, options);
      EXPECT_EQ(dp.residual_bytes(), feedback ? static_cast<std::uint64_t>(buffers.count()) * 4 : 0u);
      std::vector<float> g(static_cast<std::size_t>(buffers.count()), 0.0f);
      if (comm.rank() == 0) {
        for (std::size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(1.0 + static_cast<double>(i % 7 + 1) * ulp / 8);
      }
      std::vector<double> sent(g.size(), 0.0);
      for (int step = 0; step < kSteps; ++step) {
        core::from_host(buffers.gradients, g);
        dp.begin_step(/*sync=*/true);
        dp.finish();
        const std::vector<float> out = core::to_host(buffers.gradients);
        for (std::size_t i = 0; i < out.size(); ++i) sent[i] += out[i];
      }
      std::vector<float> g0(g.size());  // rank 0's gradient: the sum over ranks
      for (std::size_t i = 0; i < g0.size(); ++i) g0[i] = static_cast<float>(1.0 + static_cast<double>(i % 7 + 1) * ulp / 8);
      for (std::size_t i = 0; i < g0.size(); ++i) {
        if (std::fabs(sent[i] - kSteps * static_cast<double>(g0[i])) > ulp / 2) ++(feedback ? feedback_bad : plain_bad);
      }
    }
    EXPECT_EQ(feedback_bad, 0u) << coll::to_string(type) << ": with error feedback the sent values must sum to the computed ones";
    EXPECT_GT(plain_bad, 0u) << coll::to_string(type) << ": without it the check must fail (else it checks nothing)";
  }
  // f32 has no rounding to feed back: refused, naming the flag.
  train::DataParallelOptions f32;
  f32.error_feedback = true;
  try {
    train::DataParallel dp(comm, make_buffers(), f32);
    ADD_FAILURE() << "error feedback on an f32 wire was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("--grad-error-feedback needs --grad-dtype bf16 or f16"), std::string::npos) << e.what();
  }
}

}  // namespace
