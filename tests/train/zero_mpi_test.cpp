// ZeRO-1/2 (--strategy zero1|zero2) against data parallelism on real Fashion-MNIST (a subset)
// at the launcher's rank count: final parameters within DDP's float bound, bitwise equal to
// ddp --deterministic in deterministic mode (against a one-rank run in the same job), the
// optimiser state per rank about 1/P of ddp's, and checkpoints that resume across strategies
// and rank counts.

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <string>

#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/collectives/mpi_transport.hpp"
#include "hpctrain/train/preemption.hpp"
#include "hpctrain/train/trainer.hpp"
#include "strategy_comparison.hpp"
#include "training_fixture.hpp"

namespace fs = std::filesystem;
using namespace hpctrain;

namespace {

using namespace hpctrain::testing;  // strategy_comparison.hpp

const std::string& data_dir() {
  static const std::string dir = hpctrain::testing::import_fashion_subsets("hpctrain-zero-test", 2048, 0);
  return dir;
}

const auto* kokkos_env = ::testing::AddGlobalTestEnvironment(new hpctrain::testing::KokkosDataEnvironment(&data_dir));

/// A configuration that exercises every part the strategies must agree on: momentum SGD or
/// AdamW, clipping by the global norm (the small limit makes it clip on most steps), two
/// micro-batches per step, a warm-up and a cosine schedule; small buckets so the MLP spans
/// several (and the shards of every bucket matter).
train::TrainOptions options(const std::string& strategy, const std::string& optimizer) {
  train::TrainOptions o;
  o.data = data_dir() + "/train.h5";
  o.global_batch = 64;
  o.accumulate = 2;
  o.max_steps = 12;
  o.optimizer = optimizer;
  o.lr = optimizer == "adamw" ? 2e-3 : 0.05;
  o.momentum = 0.9;
  o.weight_decay = 1e-4;
  o.clip_norm = 0.5;
  o.schedule.kind = train::ScheduleKind::cosine;
  o.schedule.warmup_steps = 3;
  o.parallel.first_bucket_bytes = 16 << 10;
  o.parallel.bucket_bytes = 128 << 10;
  o.strategy = strategy;
  o.quiet = true;
  o.keep_parameters = true;
  o.log_every = 0;
  return o;
}

TEST(Zero, FinalParametersMatchDdpWithinTheFloatBound) {
  coll::Communicator comm(coll::make_mpi_transport(MPI_COMM_WORLD));
  for (const char* optimizer : {"sgd", "adamw"}) {
    const auto ddp = train::run_training(options("ddp", optimizer), comm);
    for (const char* strategy : {"zero1", "zero2"}) {
      const auto zero = train::run_training(options(strategy, optimizer), comm);
      ASSERT_EQ(zero.parameters.size(), ddp.parameters.size());
      const Difference d = compare(ddp.parameters, zero.parameters);
      if (comm.rank() == 0) {
        std::printf("%s %s vs ddp at P=%d: max |diff| %.3g (scale %.3g)\n", strategy, optimizer, comm.size(), d.worst,
                    d.scale);
      }
      EXPECT_LE(d.worst, kRelativeBound * d.scale) << strategy << " " << optimizer;
      EXPECT_EQ(zero.steps, ddp.steps);
    }
  }
  // The bound can tell: a sharding mistake of one sample per step is far outside it.
  train::TrainOptions wrong = options("zero1", "sgd");
  wrong.global_batch = 63;
  const auto off = train::run_training(wrong, comm);
  const auto ddp = train::run_training(options("ddp", "sgd"), comm);
  const Difference d = compare(ddp.parameters, off.parameters);
  EXPECT_GT(d.worst, 10 * kRelativeBound * d.scale);
}

TEST(Zero, DeterministicZero1IsBitwiseDdpDeterministicAtAnyRankCount) {
  coll::Communicator comm(coll::make_mpi_transport(MPI_COMM_WORLD));
  coll::Communicator self = comm.split(comm.rank(), 0);
  for (const char* optimizer : {"sgd", "adamw"}) {
    train::TrainOptions o = options("zero1", optimizer);
    o.deterministic = true;
    o.micro_shard = 8;
    const auto zero = train::run_training(o, comm);
    o.strategy = "ddp";
    const auto ddp_here = train::run_training(o, comm);
    EXPECT_EQ(zero.parameter_checksum, ddp_here.parameter_checksum) << optimizer << " at P=" << comm.size();
    if (comm.rank() == 0) {
      const auto ddp_one = train::run_training(o, self);  // ddp --deterministic on one rank
      EXPECT_EQ(zero.parameter_checksum, ddp_one.parameter_checksum) << optimizer << " at P=" << comm.size();
    }
    comm.barrier();
  }
}

TEST(Zero, OptimizerStateIsAboutOnePthOfDdps) {
  coll::Communicator comm(coll::make_mpi_transport(MPI_COMM_WORLD));
  const double p = comm.size();
  for (const char* optimizer : {"sgd", "adamw"}) {
    train::TrainOptions o = options("ddp", optimizer);
    o.max_steps = 1;
    o.accumulate = 1;
    const auto ddp = train::run_training(o, comm);
    const std::uint64_t full = static_cast<std::uint64_t>(ddp.parameter_count) * 4 * (optimizer == std::string("adamw") ? 2 : 1);
    EXPECT_EQ(ddp.memory.optimizer_state_bytes, full);
    EXPECT_EQ(ddp.memory.parameter_bytes, static_cast<std::uint64_t>(ddp.parameter_count) * 4);
    EXPECT_EQ(ddp.memory.gradient_bytes, static_cast<std::uint64_t>(ddp.parameter_count) * 4);
    EXPECT_GT(ddp.memory.peak_rss_bytes, ddp.memory.parameter_bytes);
    for (const char* strategy : {"zero1", "zero2"}) {
      o.strategy = strategy;
      const auto zero = train::run_training(o, comm);
      EXPECT_LE(static_cast<double>(zero.memory.optimizer_state_bytes),
                (1.0 / p + 0.05) * static_cast<double>(ddp.memory.optimizer_state_bytes))
          << strategy << " " << optimizer << " at P=" << comm.size();
      // zero1 and zero2 step their shard at the front of the model's own buffers, and zero2
      // keeps its summed blocks across micro-batches in place: no second buffer for either.
      const auto n4 = static_cast<std::uint64_t>(ddp.parameter_count) * 4;
      EXPECT_EQ(zero.memory.parameter_bytes, n4) << strategy;
      EXPECT_EQ(zero.memory.gradient_bytes, n4) << strategy;
      // The shards cover the buffer: the largest is at least 1/P of it.
      EXPECT_GE(static_cast<double>(zero.memory.optimizer_state_bytes) * p,
                static_cast<double>(ddp.memory.optimizer_state_bytes));
    }
  }
}

TEST(Zero, ReduceScatterOverlapsBackwardAndAllgatherOverlapsForward) {
  coll::Communicator comm(coll::make_mpi_transport(MPI_COMM_WORLD));
  if (comm.size() == 1) GTEST_SKIP() << "overlap needs more than one rank";
  for (const char* strategy : {"zero1", "zero2"}) {
    train::TrainOptions o = options(strategy, "sgd");
    o.model = {{"name", "cnn"}};
    o.max_steps = 6;
    o.global_batch = 32;
    o.parallel.first_bucket_bytes = 64 << 10;
    o.parallel.bucket_bytes = 256 << 10;
    const auto r = train::run_training(o, comm);
    EXPECT_TRUE(r.overlap_observed) << strategy << ": no reduce-scatter started before backward ended";
    // The parameter all-gather of step s runs while step s+1's forward computes the first layers.
    EXPECT_TRUE(r.gather_overlap_observed) << strategy << ": no forward layer ran while an all-gather was in flight";
  }
}

/// ddp at P -> zero1 at P-1 (or 1) -> ddp at P, each hop through the checkpoint of the one
/// before, against the uninterrupted ddp run. A constant schedule with a warm-up (it does not
/// depend on --max-steps, which ends each hop) and AdamW (its state and step count resume).
void check_cross_resume(bool deterministic, const std::string& middle) {
  coll::Communicator comm(coll::make_mpi_transport(MPI_COMM_WORLD));
  const int p = comm.size(), fewer = std::max(1, p - 1);
  train::TrainOptions o = options("ddp", "adamw");
  o.schedule.kind = train::ScheduleKind::constant;
  o.deterministic = deterministic;
  o.micro_shard = 8;
  o.max_steps = 15;
  const auto whole = train::run_training(o, comm);

  const std::string dir = data_dir() + "/ckpt-" + middle + (deterministic ? "-det" : "");
  o.checkpoint_dir = dir;
  o.max_steps = 5;
  run_on(comm, p, o);
  o.resume = "auto";
  o.strategy = middle;
  o.max_steps = 10;
  const auto hop = run_on(comm, fewer, o);
  o.strategy = "ddp";
  o.max_steps = 15;
  const auto last = run_on(comm, p, o);
  if (comm.rank() == 0) {
    EXPECT_EQ(hop.resumed_from, dir + "/step-5");
    EXPECT_EQ(last.resumed_from, dir + "/step-10");
    EXPECT_EQ(last.steps, 15);
    if (deterministic) {
      EXPECT_EQ(last.parameter_checksum, whole.parameter_checksum) << "ddp P=" << p << " -> " << middle << " P=" << fewer;
    } else {
      const Difference d = compare(whole.parameters, last.parameters);
      std::printf("ddp P=%d -> %s P=%d -> ddp P=%d vs uninterrupted: max |diff| %.3g (scale %.3g)\n", p,
                  middle.c_str(), fewer, p, d.worst, d.scale);
      EXPECT_LE(d.worst, kRelativeBound * d.scale);
    }
    fs::remove_all(dir);
  }
  comm.barrier();
}

// Preemption under zero1: a signal (here raised on rank 0 before the run, so it is seen at the
// first step boundary) makes every rank write its optimiser-state slices and stop; the run
// resumes under ddp at another rank count and ends bitwise equal to the uninterrupted run
// (deterministic mode, AdamW, warm-up plus cosine).
TEST(Zero, PreemptedZero1RunResumesUnderDdpBitwise) {
  coll::Communicator comm(coll::make_mpi_transport(MPI_COMM_WORLD));
  train::TrainOptions o = options("ddp", "adamw");
  o.deterministic = true;
  o.micro_shard = 8;
  const auto whole = train::run_training(o, comm);

  o.strategy = "zero1";
  o.checkpoint_dir = data_dir() + "/ckpt-preempt";
  train::install_preemption_handlers();
  if (comm.rank() == 0) std::raise(SIGUSR1);
  const auto stopped = train::run_training(o, comm);
  train::reset_preemption();
  EXPECT_TRUE(stopped.preempted);
  EXPECT_EQ(stopped.steps, 1);
  o.strategy = "ddp";
  o.resume = "auto";
  const auto resumed = run_on(comm, std::max(1, comm.size() - 1), o);
  if (comm.rank() == 0) {
    EXPECT_EQ(resumed.resumed_from, o.checkpoint_dir + "/step-1");
    EXPECT_EQ(resumed.steps, whole.steps);
    EXPECT_EQ(resumed.parameter_checksum, whole.parameter_checksum);
    fs::remove_all(o.checkpoint_dir);
  }
  comm.barrier();
}

TEST(Zero, CheckpointsResumeAcrossStrategiesAndRankCounts) { check_cross_resume(false, "zero1"); }
TEST(Zero, Zero2CheckpointsResumeAcrossStrategies) { check_cross_resume(false, "zero2"); }
TEST(Zero, DeterministicCrossResumeIsBitwise) { check_cross_resume(true, "zero1"); }

}  // namespace
