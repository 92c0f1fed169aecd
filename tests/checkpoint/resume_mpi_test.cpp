// Resume equivalence through the real trainer (train::run_training, in process) on a
// Fashion-MNIST subset: S steps uninterrupted vs S/2 steps, checkpoint, resume, S/2 more.
//  * same rank count: the final parameters are bitwise identical;
//  * another rank count (the first Q ranks): identical up to float rounding.
// Two configurations: SGD with momentum and dropout (momentum buffers and the dropout RNG
// position must come back), and AdamW with gradient accumulation, warm-up and a cosine
// schedule (the optimiser's step count, the LR schedule position and the data-loader position
// inside an accumulation group must come back). The resume point lies inside an epoch, and
// the second half crosses an epoch boundary.

#include <gtest/gtest.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/collectives/mpi_transport.hpp"
#include "hpctrain/io/checkpoint.hpp"
#include "hpctrain/train/trainer.hpp"
#include "training_fixture.hpp"

namespace fs = std::filesystem;
using namespace hpctrain;

namespace {

using hpctrain::testing::world_rank;

/// A 1024-sample Fashion-MNIST subset imported once per job by rank 0.
const std::string& data_dir() {
  static const std::string dir = hpctrain::testing::import_fashion_subsets("hpctrain-resume-test", 1024, 0);
  return dir;
}

const auto* kokkos_env = ::testing::AddGlobalTestEnvironment(new hpctrain::testing::KokkosDataEnvironment(&data_dir));

struct Config {
  const char* name;
  train::TrainOptions options;
  std::int64_t steps;  // S; the checkpoint is at S/2
};

Config sgd_momentum_dropout() {
  train::TrainOptions o;
  o.model = {{"name", "mlp"}, {"hidden", {96, 48}}, {"dropout", 0.1}};
  o.global_batch = 64;  // 16 batches per epoch
  o.lr = 0.05;
  o.momentum = 0.9;
  return {"sgd", o, 24};  // resume at step 12 (mid epoch 1), epoch boundary at 16
}

Config adamw_accumulate_cosine() {
  train::TrainOptions o;
  o.model = {{"name", "mlp"}, {"hidden", {64}}};
  o.global_batch = 48;  // 21 batches per epoch -> 11 steps (the last one a single micro-batch)
  o.accumulate = 2;
  o.optimizer = "adamw";
  o.lr = 2e-3;
  o.weight_decay = 0.01;
  o.schedule.kind = train::ScheduleKind::cosine;
  o.schedule.warmup_steps = 3;
  o.schedule.min_lr = 5e-4;  // the last steps still move the parameters (the check below)
  return {"adamw", o, 16};  // resume at step 8 (mid epoch 1), epoch boundary at 11
}

train::TrainOptions common(train::TrainOptions o, std::int64_t steps) {
  o.data = data_dir() + "/train.h5";
  o.epochs = 3;
  o.max_steps = steps;
  o.quiet = true;
  o.log_every = 0;
  o.keep_parameters = true;
  return o;
}

std::string step_dir(const std::string& dir, std::int64_t step) { return dir + "/step-" + std::to_string(step); }

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, static_cast<double>(std::fabs(a[i] - b[i])));
  return worst;
}

// A failing case names its configuration ("adamw"), not the function's address.
void PrintTo(Config (*make)(), std::ostream* os) { *os << make().name; }

class Resume : public ::testing::TestWithParam<Config (*)()> {};

TEST_P(Resume, SameRankCountIsBitwiseAndOtherRankCountsWithinRounding) {
  coll::Communicator comm(coll::make_mpi_transport(MPI_COMM_WORLD));
  const Config config = GetParam()();
  const std::int64_t S = config.steps, half = S / 2;
  const std::string root = data_dir() + "/" + config.name;
  const train::TrainOptions base = common(config.options, S);

  // A: uninterrupted, no checkpoints.
  const auto a = train::run_training(base, comm);
  ASSERT_EQ(a.steps, S);

  // B: uninterrupted, checkpointing every S/2 steps: checkpointing must not perturb training.
  train::TrainOptions with_ckpt = base;
  with_ckpt.checkpoint_dir = root + "/full";
  with_ckpt.checkpoint_every = half;
  const auto b = train::run_training(with_ckpt, comm);
  EXPECT_EQ(b.checkpoints_written, 2);
  EXPECT_EQ(b.parameter_checksum, a.parameter_checksum);

  // C: the interrupted run. A job killed after committing step-S/2 leaves exactly B's step-S/2
  // directory and `latest` naming it; a new job resumes with --resume auto and runs to S.
  const std::string interrupted = root + "/interrupted";
  if (comm.rank() == 0) {
    fs::create_directories(interrupted);
    fs::copy(step_dir(with_ckpt.checkpoint_dir, half), step_dir(interrupted, half), fs::copy_options::recursive);
    std::ofstream(interrupted + "/latest") << "step-" << half << "\n";
  }
  comm.barrier();
  train::TrainOptions second = with_ckpt;
  second.checkpoint_dir = interrupted;
  second.resume = "auto";
  const auto c = train::run_training(second, comm);
  EXPECT_EQ(c.resumed_from, step_dir(interrupted, half));
  EXPECT_EQ(c.steps, S);
  EXPECT_EQ(c.checkpoints_written, 1);  // the final one
  EXPECT_EQ(c.parameter_checksum, a.parameter_checksum) << "resume at the same rank count is not bitwise identical";
  std::size_t bitwise_differences = 0;
  for (std::size_t i = 0; i < a.parameters.size(); ++i)
    if (std::memcmp(&a.parameters[i], &c.parameters[i], sizeof(float)) != 0) ++bitwise_differences;
  EXPECT_EQ(bitwise_differences, 0u);

  // The checkpoint's parameters differ from the final ones (the second half did train).
  const auto manifest = io::read_manifest(step_dir(interrupted, half));
  EXPECT_NE(manifest.at("metadata").at("parameter_checksum").get<std::uint64_t>(), a.parameter_checksum);
  EXPECT_EQ(manifest.at("world_size").get<int>(), comm.size());

  // D: resume the P-rank checkpoint on the first Q ranks, for every Q < P (Q = 1 at np 1: then
  // it is the same rank count again and must be bitwise). Bound as in
  // tests/train/train_mpi_test.cpp: only the summation order of gradient contributions differs
  // (within a rank's gemm vs across ranks), ~(B + P) u sum|g| per step, accumulated over S/2
  // steps with momentum/Adam and the nonlinearity: 2e-4 of the parameter scale. A lost or
  // repeated step, batch or optimiser state moves parameters by far more (checked below).
  double scale = 0;
  for (float p : a.parameters) scale = std::max(scale, static_cast<double>(std::fabs(p)));
  const int last_q = comm.size() == 1 ? 1 : comm.size() - 1;
  for (int Q = 1; Q <= last_q; ++Q) {
    coll::Communicator sub = comm.split(comm.rank() < Q ? 0 : 1, comm.rank());
    if (comm.rank() < Q) {
      train::TrainOptions q = base;
      q.resume = step_dir(root + "/full", half);
      const auto d = train::run_training(q, sub);
      EXPECT_EQ(d.resumed_from, q.resume);
      EXPECT_EQ(d.steps, S);
      const double worst = max_abs_diff(a.parameters, d.parameters);
      if (comm.rank() == 0) {
        std::printf("[%s] written by %d ranks, resumed on %d: max |diff| = %.3g (scale %.3g)\n", config.name,
                    comm.size(), Q, worst, scale);
      }
      EXPECT_LE(worst, 2e-4 * scale) << "resumed on " << Q << " ranks";
      if (Q == comm.size()) {
        EXPECT_EQ(d.parameter_checksum, a.parameter_checksum);
      }
      if (Q == 1) {
        // The bound can tell: one step fewer after the resume is well outside it.
        train::TrainOptions short_run = q;
        short_run.max_steps = S - 1;
        const auto e = train::run_training(short_run, sub);
        const double off = max_abs_diff(a.parameters, e.parameters);
        if (comm.rank() == 0) std::printf("[%s] one step fewer: max |diff| = %.3g\n", config.name, off);
        EXPECT_GT(off, 5 * 2e-4 * scale);
      }
    }
    comm.barrier();
  }
}

INSTANTIATE_TEST_SUITE_P(Checkpoint, Resume, ::testing::Values(&sgd_momentum_dropout, &adamw_accumulate_cosine),
                         [](const ::testing::TestParamInfo<Config (*)()>& info) { return std::string(info.param().name); });

}  // namespace
