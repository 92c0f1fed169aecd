// ZeRO-1/2 (--strategy zero1|zero2) on a model with batch norm (resnet, small) at the
// launcher's rank count: the running statistics, which ride the gradient slots of non-trainable
// entries (docs/models.md), reach every rank although the gradient is reduce-scattered. Against
// ddp at the same P, same seed: parameters and running statistics within the float bound,
// batches_tracked exact, and every rank's running statistics bitwise equal; in deterministic
// mode zero1 is bitwise ddp --deterministic (at P and on one rank); checkpoints resume at
// another rank count.

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/collectives/mpi_transport.hpp"
#include "hpctrain/models/registry.hpp"
#include "hpctrain/train/trainer.hpp"
#include "strategy_comparison.hpp"
#include "training_fixture.hpp"

namespace fs = std::filesystem;
using namespace hpctrain;

namespace {

using namespace hpctrain::testing;  // strategy_comparison.hpp

const std::string& data_dir() {
  static const std::string dir = hpctrain::testing::import_fashion_subsets("hpctrain-zero-bn-test", 2048, 0);
  return dir;
}

const auto* kokkos_env = ::testing::AddGlobalTestEnvironment(new hpctrain::testing::KokkosDataEnvironment(&data_dir));

const nlohmann::json kResnet = {{"name", "resnet"}, {"channels", {4, 8}}};

/// Two micro-batches per step (the statistics of both must add up), clipping with a small limit
/// (it clips on most steps: a norm that counted the state slots, sums of ~10^4 elements, would
/// scale the step far differently), and a weight decay large enough that an optimiser moving the
/// running statistics shows (about 2.5e-4 of them per step, against the 2e-4 bound over 6).
/// One bucket per tensor: every statistic is cut across the ranks' blocks, while a layer's
/// element count (the slot of batches_tracked, one element) has one owner, so a rank that
/// used its own shard's sums (or the unreduced slots) for the channels it owns would be wrong.
train::TrainOptions options(const std::string& strategy) {
  train::TrainOptions o;
  o.data = data_dir() + "/train.h5";
  o.model = kResnet;
  o.global_batch = 64;
  o.accumulate = 2;
  o.max_steps = 6;
  o.lr = 0.05;
  o.momentum = 0.9;
  o.weight_decay = 5e-3;
  o.clip_norm = 0.5;
  o.schedule.kind = train::ScheduleKind::constant;
  o.parallel.first_bucket_bytes = sizeof(float);
  o.parallel.bucket_bytes = sizeof(float);
  o.strategy = strategy;
  o.quiet = true;
  o.keep_parameters = true;
  o.log_every = 0;
  return o;
}

/// The parameter buffer split by kind: trainable weights, running mean/var, batches tracked.
struct Parts {
  std::vector<float> weights, statistics, tracked;
};
Parts split(const std::vector<float>& params) {
  const auto model = models::build_model<float>(kResnet);
  Parts out;
  for (const models::ParameterInfo& info : model->parameter_info()) {
    std::vector<float>& to = info.trainable                                            ? out.weights
                             : info.name.find("batches_tracked") != std::string::npos ? out.tracked
                                                                                       : out.statistics;
    to.insert(to.end(), params.begin() + info.offset, params.begin() + info.offset + info.count);
  }
  return out;
}

/// Whether every rank's `values` are bitwise rank 0's.
bool same_on_every_rank(coll::Communicator& comm, const std::vector<float>& values) {
  std::uint64_t mine = train::parameter_checksum(values.data(), values.size()), first = mine;
  comm.broadcast(&first, 1, coll::DataType::i64, 0);  // the checksum's 64 bits
  int differs = mine != first ? 1 : 0;
  comm.allreduce(&differs, 1, coll::ReduceOp::max);
  return differs == 0;
}

TEST(ZeroBatchNorm, MatchesDdpWithinTheFloatBoundAndRanksAgreeBitwise) {
  coll::Communicator comm(coll::make_mpi_transport(MPI_COMM_WORLD));
  const auto ddp = train::run_training(options("ddp"), comm);
  const Parts want = split(ddp.parameters);
  ASSERT_FALSE(want.statistics.empty());
  for (const char* strategy : {"zero1", "zero2"}) {
    const auto zero = train::run_training(options(strategy), comm);
    ASSERT_EQ(zero.parameters.size(), ddp.parameters.size());
    const Parts got = split(zero.parameters);
    const Difference w = compare(want.weights, got.weights), s = compare(want.statistics, got.statistics);
    if (comm.rank() == 0) {
      std::printf("%s vs ddp at P=%d: weights max |diff| %.3g (scale %.3g), running stats %.3g (scale %.3g)\n",
                  strategy, comm.size(), w.worst, w.scale, s.worst, s.scale);
    }
    EXPECT_LE(w.worst, kRelativeBound * w.scale) << strategy;
    EXPECT_LE(s.worst, kRelativeBound * s.scale) << strategy;
    EXPECT_EQ(got.tracked, std::vector<float>(want.tracked.size(), 6.0f)) << strategy;
    EXPECT_TRUE(same_on_every_rank(comm, got.statistics)) << strategy << ": running statistics differ between ranks";
    EXPECT_TRUE(same_on_every_rank(comm, zero.parameters)) << strategy;
  }
  // The bound can tell: one sample fewer per step moves the running statistics far outside it.
  train::TrainOptions wrong = options("zero1");
  wrong.global_batch = 63;
  const Difference off = compare(want.statistics, split(train::run_training(wrong, comm).parameters).statistics);
  EXPECT_GT(off.worst, 10 * kRelativeBound * off.scale);
}

TEST(ZeroBatchNorm, DeterministicZero1IsBitwiseDdpDeterministic) {
  coll::Communicator comm(coll::make_mpi_transport(MPI_COMM_WORLD));
  coll::Communicator self = comm.split(comm.rank(), 0);
  train::TrainOptions o = options("zero1");
  o.deterministic = true;
  o.micro_shard = 8;
  const auto zero = train::run_training(o, comm);
  o.strategy = "ddp";
  const auto ddp_here = train::run_training(o, comm);
  EXPECT_EQ(zero.parameter_checksum, ddp_here.parameter_checksum) << "P=" << comm.size();
  EXPECT_TRUE(same_on_every_rank(comm, zero.parameters));
  if (comm.rank() == 0) {
    const auto ddp_one = train::run_training(o, self);
    EXPECT_EQ(zero.parameter_checksum, ddp_one.parameter_checksum) << "P=" << comm.size() << " vs 1";
  }
  comm.barrier();
}

/// zero1 at P-1 for 3 steps, resumed from its checkpoint (the optimiser state in P-1 slices,
/// the running statistics in the parameters) by zero1 at P for 3 more, against zero1 at P
/// uninterrupted: bitwise in deterministic mode, within the float bound otherwise (--sync-bn:
/// what the P-1 ranks compute equals what P ranks would, within rounding).
void check_resume(bool deterministic) {
  coll::Communicator comm(coll::make_mpi_transport(MPI_COMM_WORLD));
  const int p = comm.size();
  train::TrainOptions o = options("zero1");
  o.deterministic = deterministic;
  o.micro_shard = 8;
  // Batch norm normalises with each rank's own samples, so results depend on P unless the
  // statistics are global: --sync-bn (deterministic mode: the micro-shard's, P-independent).
  o.sync_bn = !deterministic;
  const auto whole = train::run_training(o, comm);

  o.checkpoint_dir = data_dir() + (deterministic ? "/ckpt-det" : "/ckpt");
  o.max_steps = 3;
  run_on(comm, p - 1, o);
  o.resume = "auto";
  o.max_steps = 6;
  const auto resumed = train::run_training(o, comm);
  EXPECT_EQ(resumed.resumed_from, o.checkpoint_dir + "/step-3");
  EXPECT_EQ(resumed.steps, 6);
  const Parts want = split(whole.parameters), got = split(resumed.parameters);
  EXPECT_EQ(got.tracked, want.tracked);
  if (deterministic) {
    EXPECT_EQ(resumed.parameter_checksum, whole.parameter_checksum) << "zero1 P=" << p - 1 << " -> P=" << p;
  } else {
    const Difference w = compare(want.weights, got.weights), s = compare(want.statistics, got.statistics);
    if (comm.rank() == 0) {
      std::printf("zero1 P=%d -> P=%d vs uninterrupted: weights max |diff| %.3g (scale %.3g), running stats %.3g "
                  "(scale %.3g)\n", p - 1, p, w.worst, w.scale, s.worst, s.scale);
    }
    EXPECT_LE(w.worst, kRelativeBound * w.scale);
    EXPECT_LE(s.worst, kRelativeBound * s.scale);
  }
  if (comm.rank() == 0) fs::remove_all(o.checkpoint_dir);
  comm.barrier();
}

TEST(ZeroBatchNorm, Zero1CheckpointResumesAtAnotherRankCount) { check_resume(false); }
TEST(ZeroBatchNorm, DeterministicZero1ResumeIsBitwise) { check_resume(true); }

}  // namespace
