// End-to-end data-parallel training on real Fashion-MNIST (a subset, for speed) at the
// launcher's rank count, against a one-rank run of the same configuration in the same job.

#include <gtest/gtest.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "hpctrain/base/error.hpp"
#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/collectives/mpi_transport.hpp"
#include "hpctrain/train/device_batch.hpp"
#include "hpctrain/train/finite_guard.hpp"
#include "hpctrain/train/trainer.hpp"
#include "training_fixture.hpp"

namespace fs = std::filesystem;
using namespace hpctrain;

namespace {

using hpctrain::testing::world_rank;

const std::string& data_dir() {
  static const std::string dir = hpctrain::testing::import_fashion_subsets("hpctrain-train-test", 4096, 2000);
  return dir;
}

train::TrainOptions base_options() {
  train::TrainOptions o;
  o.data = data_dir() + "/train.h5";
  o.eval_data = data_dir() + "/test.h5";
  o.global_batch = 64;
  o.lr = 0.05;
  o.momentum = 0.9;
  o.quiet = true;
  o.keep_parameters = true;
  o.log_every = 0;
  return o;
}

const auto* kokkos_env = ::testing::AddGlobalTestEnvironment(new hpctrain::testing::KokkosDataEnvironment(&data_dir));

// DeviceBatch: the rows asked for, from a batch read into memory and from a data set held in
// memory (rows gathered by sample index); start_load_rows + wait as load_rows; rows() as views
// of the loaded rows, not copies; rows outside the batch refused. (On a GPU build the copy goes
// through pinned staging on a stream of its own: compiled by ctest -R cuda.compute, not run here.)
TEST(DeviceBatch, LoadsTheRowsAskedForAndViewsThem) {
  const core::Shape sample{2, 3};
  const std::size_t width = 6, count = 5;
  io::Batch read;
  read.count = count;
  for (std::size_t i = 0; i < count * width; ++i) read.samples.push_back(0.5f * static_cast<float>(i));
  read.labels = {7, 1, 4, 9, 2};
  std::vector<float> table(10 * width);
  for (std::size_t i = 0; i < table.size(); ++i) table[i] = -static_cast<float>(i);
  io::Batch resident;
  resident.count = count;
  resident.resident = table.data();
  resident.sample_indices = {8, 0, 3, 3, 6};
  resident.labels = read.labels;
  for (const io::Batch* b : {&read, &resident}) {
    const auto want_row = [&](std::size_t k) {
      const float* row = b->resident ? b->resident + b->sample_indices[k] * width : b->samples.data() + k * width;
      return std::vector<float>(row, row + width);
    };
    train::DeviceBatch started, loaded;
    started.start_load_rows(*b, 1, 3, sample);
    started.wait();
    loaded.load_rows(*b, 1, 3, sample);
    ASSERT_EQ(started.x.shape, (core::Shape{3, 2, 3}));
    const std::vector<float> x = core::to_host(started.x.data);
    EXPECT_EQ(x, core::to_host(loaded.x.data));
    EXPECT_EQ(core::to_host(started.labels), (std::vector<std::int32_t>{1, 4, 9}));
    for (std::size_t k = 0; k < 3; ++k) {
      EXPECT_EQ(std::vector<float>(x.begin() + k * width, x.begin() + (k + 1) * width), want_row(1 + k)) << k;
    }
    const train::DeviceBatch part = started.rows(1, 2);
    ASSERT_EQ(part.x.shape, (core::Shape{2, 2, 3}));
    EXPECT_EQ(part.x.data.data(), started.x.data.data() + width) << "rows() must be a view";
    EXPECT_EQ(part.labels.data(), started.labels.data() + 1);
    EXPECT_EQ(core::to_host(part.labels), (std::vector<std::int32_t>{4, 9}));
    EXPECT_EQ(started.rows(3, 0).x.shape, (core::Shape{0, 2, 3}));
    EXPECT_THROW(started.rows(2, 2), Error);
    EXPECT_THROW(started.start_load_rows(*b, 3, 3, sample), Error);
  }
}

TEST(FiniteGuard, NamesTheLowestRankWhoseLossOrGradientIsNotFinite) {
  coll::Communicator comm(coll::make_mpi_transport(MPI_COMM_WORLD));
  const int last = comm.size() - 1;
  // All finite: one all-reduce says so on every rank.
  EXPECT_TRUE(train::check_finite_step(comm, 0.5, 0).finite());
  // Non-finite elements in the last rank's part of the gradient (a shard under ZeRO), every loss finite.
  const std::int64_t bad_elements = comm.rank() == last ? 3 : 0;
  train::StepFiniteness f = train::check_finite_step(comm, 0.5, bad_elements);
  EXPECT_FALSE(f.finite());
  EXPECT_EQ(f.loss_rank, -1);
  EXPECT_EQ(f.gradient_rank, last);
  EXPECT_EQ(f.describe(7, comm.rank(), 0.5),
            "step 7: the summed gradient holds a NaN or an infinity on rank " + std::to_string(last) +
                " (the loss is finite)");
  // A NaN loss on every rank from 1 on (or rank 0 alone at np 1): the lowest is named, its value on its own rank.
  const double loss = comm.rank() >= std::min(1, last) ? std::nan("") : 0.5;
  f = train::check_finite_step(comm, loss, bad_elements);
  EXPECT_EQ(f.loss_rank, std::min(1, last));
  EXPECT_EQ(f.gradient_rank, last);
  const std::string text = f.describe(3, comm.rank(), loss);
  EXPECT_EQ(text.rfind("step 3: the training loss is not finite on rank " + std::to_string(std::min(1, last)), 0), 0u)
      << text;
  EXPECT_EQ(text.find("(nan)") != std::string::npos, comm.rank() == std::min(1, last)) << text;
}

TEST(Training, MlpLearnsFashionMnistSubset) {
  coll::Communicator comm(coll::make_mpi_transport(MPI_COMM_WORLD));
  train::TrainOptions o = base_options();
  o.epochs = 2;
  const auto r = train::run_training(o, comm);
  EXPECT_EQ(r.steps, 2 * (4096 / 64));
  EXPECT_EQ(r.eval.samples, 2000);
  // 2 epochs over 4096 samples: chance is 10%; a working MLP reaches about 78-80%.
  EXPECT_GE(r.eval.accuracy, 0.72) << "test loss " << r.eval.loss;
  EXPECT_LT(r.final_train_loss, 0.8);
}

TEST(Training, ResnetAndTransformerLearnFashionMnistSubset) {
  // The model zoo end to end through the trainer: two epochs over 4096 samples at global batch 64
  // (128 steps). Chance is 10 %. Measured at np 1-4: resnet 52-60 % (train loss ~0.7), the
  // transformer 64-66 %. So early in training the resnet's evaluation with running statistics
  // lags its weights (an EMA over ~10 steps): PyTorch's own resnet, trained the same way, scores
  // 64 % with its running statistics and 74 % with statistics recomputed after training, and
  // PyTorch evaluating hpctrain's parameters and running statistics gives hpctrain's accuracy to
  // the sample (checked by hand). Hence the looser bound for the resnet.
  // np 1 and 2 only: on this 2-core machine 3-4 oversubscribed ranks take 70-110 s for it.
  int ranks = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  if (ranks > 2) GTEST_SKIP() << "runs at np 1 and 2";
  coll::Communicator comm(coll::make_mpi_transport(MPI_COMM_WORLD));
  for (const char* name : {"resnet", "transformer"}) {
    train::TrainOptions o = base_options();
    o.model = {{"name", name}};
    o.keep_parameters = false;
    o.epochs = 2;
    const auto r = train::run_training(o, comm);
    if (comm.rank() == 0) std::printf("%s: test accuracy %.4f at P=%d\n", name, r.eval.accuracy, comm.size());
    EXPECT_EQ(r.eval.samples, 2000);
    EXPECT_GE(r.eval.accuracy, std::string(name) == "resnet" ? 0.4 : 0.55) << name << ": test loss " << r.eval.loss;
    EXPECT_LT(r.final_train_loss, 1.5) << name;  // chance: ln 10 = 2.30
  }
}

/// Largest |a_i - b_i| and the largest |a_i| (the parameter scale).
std::pair<double, double> max_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, static_cast<double>(std::fabs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(a[i])));
  }
  return {worst, scale};
}

TEST(Training, ParametersMatchOneRankRun) {
  // Same seed, same global batch: the P-rank result must equal the 1-rank result up to float
  // rounding. The only difference is the order in which per-sample gradient contributions are
  // added (within a rank's gemm vs across ranks in the all-reduce). Each step's gradient then
  // differs by at most about (B + P) u sum|g_i| (u = 2^-24), i.e. ~1e-5 relative for B = 64;
  // over 30 SGD steps with momentum 0.9 and lr 0.05 those differences add up (and are mildly
  // amplified by the nonlinearity), so the bound is 2e-4 relative to the parameter scale,
  // while an error in sharding or averaging (a wrong divisor, a missing or duplicated sample)
  // changes parameters by 1e-2 or more after the first step.
  coll::Communicator comm(coll::make_mpi_transport(MPI_COMM_WORLD));
  train::TrainOptions o = base_options();
  o.max_steps = 30;
  o.eval_data.clear();
  const auto parallel = train::run_training(o, comm);
  coll::Communicator self = comm.split(comm.rank(), 0);  // every rank alone
  if (comm.rank() == 0) {
    const auto single = train::run_training(o, self);
    ASSERT_EQ(single.parameters.size(), parallel.parameters.size());
    const auto [worst, scale] = max_difference(single.parameters, parallel.parameters);
    std::printf("max |p_P - p_1| = %.3g (parameter scale %.3g) at P=%d\n", worst, scale, comm.size());
    EXPECT_LE(worst, 2e-4 * scale);
    if (comm.size() == 1) {
      EXPECT_EQ(single.parameter_checksum, parallel.parameter_checksum);  // same code path: bitwise
    }
    // A deliberately wrong configuration (one sample fewer per step) is far outside the bound:
    // the test can tell.
    train::TrainOptions wrong = o;
    wrong.global_batch = 63;
    const auto off = train::run_training(wrong, self);
    double diff = 0;
    for (std::size_t i = 0; i < off.parameters.size(); ++i) {
      diff = std::max(diff, static_cast<double>(std::fabs(off.parameters[i] - single.parameters[i])));
    }
    EXPECT_GT(diff, 2e-4 * scale * 10);
  }
  comm.barrier();
}

/// The epoch's last batch holds 1 sample (4096 = 91 x 45 + 1, drop_last off), so at P >= 2 every
/// rank but the last has none in that step, after steps in which it had some. Its dense layers
/// write their gradients in a step's first backward instead of adding to a zeroed buffer
/// (begin_gradients): a rank with no backward must still send zeros, not the last step's
/// gradient. The run goes on into the second epoch; the P-rank parameters must equal the
/// 1-rank ones within the bound of ParametersMatchOneRankRun. Sending a stale gradient (one
/// step's whole gradient again) moves them by far more than that.
TEST(Training, ARankWithoutSamplesInAStepSendsZeros) {
  coll::Communicator comm(coll::make_mpi_transport(MPI_COMM_WORLD));
  train::TrainOptions o = base_options();
  o.global_batch = 45;
  o.drop_last = false;
  o.epochs = 2;
  o.max_steps = 95;  // 92 steps in the first epoch, the last of them 1 sample
  o.eval_data.clear();
  const auto parallel = train::run_training(o, comm);
  coll::Communicator self = comm.split(comm.rank(), 0);
  if (comm.rank() == 0) {
    const auto single = train::run_training(o, self);
    ASSERT_EQ(single.parameters.size(), parallel.parameters.size());
    const auto [worst, scale] = max_difference(single.parameters, parallel.parameters);
    std::printf("1-sample last batch: max |p_P - p_1| = %.3g (parameter scale %.3g) at P=%d\n", worst, scale,
                comm.size());
    EXPECT_LE(worst, 2e-4 * scale);
  }
  comm.barrier();
}

TEST(Training, SyncBatchNormMatchesOneRankRun) {
  // --sync-bn: every rank normalises with the global batch's statistics, so P ranks compute
  // what one rank does on the whole batch, up to float rounding (the sums are taken in another
  // order); the parameters include the running statistics. Without it each rank normalises with
  // its own 64/P samples: at P >= 2 the result is far outside that bound (the control).
  coll::Communicator comm(coll::make_mpi_transport(MPI_COMM_WORLD));
  train::TrainOptions o = base_options();
  o.model = {{"name", "resnet"}, {"channels", {4, 8}}};
  o.max_steps = 10;
  o.weight_decay = 1e-4;
  o.eval_data.clear();
  o.sync_bn = true;
  const auto synced = train::run_training(o, comm);
  train::TrainOptions local = o;
  local.sync_bn = false;
  const auto unsynced = train::run_training(local, comm);
  coll::Communicator self = comm.split(comm.rank(), 0);
  if (comm.rank() == 0) {
    const auto single = train::run_training(local, self);
    ASSERT_EQ(single.parameters.size(), synced.parameters.size());
    const auto [worst, scale] = max_difference(single.parameters, synced.parameters);
    const auto [control, _] = max_difference(single.parameters, unsynced.parameters);
    std::printf("sync-bn: max |p_P - p_1| = %.3g, without sync %.3g (scale %.3g) at P=%d\n", worst, control, scale,
                comm.size());
    // The scale is the batches-tracked counter (10 after 10 steps): bound 1e-3, control 1e-2.
    EXPECT_LE(worst, 1e-4 * scale);
    if (comm.size() >= 2) {
      EXPECT_GT(control, 1e-3 * scale);
    }
  }
  comm.barrier();
}

TEST(Training, GradientAllreduceOverlapsBackward) {
  coll::Communicator comm(coll::make_mpi_transport(MPI_COMM_WORLD));
  if (comm.size() == 1) GTEST_SKIP() << "overlap needs more than one rank";
  train::TrainOptions o = base_options();
  o.model = {{"name", "cnn"}};
  o.max_steps = 4;
  o.global_batch = 32;
  o.eval_data.clear();
  o.parallel.first_bucket_bytes = 64 << 10;
  o.parallel.bucket_bytes = 256 << 10;
  const std::string trace = data_dir() + "/timeline.json";
  o.timeline_path = trace;
  const auto r = train::run_training(o, comm);
  EXPECT_TRUE(r.overlap_observed);
  if (comm.rank() == 0) {
    // The written trace holds every rank's spans; check from it that some all-reduce began
    // before the backward span of its step ended.
    std::ifstream in(trace);
    const auto j = nlohmann::json::parse(in);
    int ranks_seen = 0;
    bool overlap = false;
    for (int rank = 0; rank < comm.size(); ++rank) {
      std::vector<std::pair<double, double>> backward;
      std::vector<double> allreduce_starts;
      for (const auto& e : j["traceEvents"]) {
        if (e["ph"] != "X" || e["pid"] != rank) continue;
        if (e["name"] == "backward") backward.emplace_back(e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>());
        if (e["cat"] == "allreduce") allreduce_starts.push_back(e["ts"].get<double>());
      }
      if (!backward.empty()) ++ranks_seen;
      for (const auto& [b0, b1] : backward)
        for (double a : allreduce_starts)
          if (a > b0 && a < b1) overlap = true;
    }
    EXPECT_EQ(ranks_seen, comm.size());
    EXPECT_TRUE(overlap) << "no all-reduce span starts inside a backward span";
  }
}

}  // namespace
