// --grad-dtype bf16|f16: gradients cross the wire in 16 bits (f32 additions inside the
// reduction, f32 master weights). The accuracy check of tests/train/train_mpi_test.cpp (an MLP
// after 2 epochs on a 4096-sample Fashion-MNIST subset reaches >= 0.72; a working one gets
// about 0.78-0.80) must hold within 0.5 points with bf16, under ddp (also with error feedback)
// and zero1, and a
// deliberately wrong cast (exponent truncated to its low 5 bits) must fail it.

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <string>

#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/collectives/mpi_transport.hpp"
#include "hpctrain/train/trainer.hpp"
#include "training_fixture.hpp"

using namespace hpctrain;

namespace {

const std::string& data_dir() {
  static const std::string dir = hpctrain::testing::import_fashion_subsets("hpctrain-grad-dtype-test", 4096, 2000);
  return dir;
}

const auto* kokkos_env = ::testing::AddGlobalTestEnvironment(new hpctrain::testing::KokkosDataEnvironment(&data_dir));

constexpr double kF32Threshold = 0.72;                  // train_mpi_test.cpp's MLP threshold
constexpr double kThreshold = kF32Threshold - 0.005;  // the "within 0.5 points"

train::TrainOptions options(const std::string& strategy, const std::string& grad_dtype) {
  train::TrainOptions o;
  o.data = data_dir() + "/train.h5";
  o.eval_data = data_dir() + "/test.h5";
  o.global_batch = 64;
  o.epochs = 2;
  o.lr = 0.05;
  o.momentum = 0.9;
  o.strategy = strategy;
  o.grad_dtype = grad_dtype;
  o.quiet = true;
  o.log_every = 0;
  return o;
}

double accuracy(coll::Communicator& comm, const train::TrainOptions& o) {
  const auto r = train::run_training(o, comm);
  if (comm.rank() == 0) {
    std::printf("%s --grad-dtype %s%s%s at P=%d: test accuracy %.4f\n", o.strategy.c_str(), o.grad_dtype.c_str(),
                o.grad_error_feedback ? " --grad-error-feedback" : "",
                o.parallel.wire_cast == train::WireCast::truncated_exponent_test ? " (wrong cast)" : "", comm.size(),
                r.eval.accuracy);
  }
  return r.eval.accuracy;
}

TEST(GradDtype, Bf16GradientsKeepTheAccuracyOfF32) {
  coll::Communicator comm(coll::make_mpi_transport(MPI_COMM_WORLD));
  EXPECT_GE(accuracy(comm, options("ddp", "f32")), kF32Threshold);
  EXPECT_GE(accuracy(comm, options("ddp", "bf16")), kThreshold);
  EXPECT_GE(accuracy(comm, options("zero1", "bf16")), kThreshold);
  train::TrainOptions feedback = options("ddp", "bf16");
  feedback.grad_error_feedback = true;  // --grad-error-feedback
  EXPECT_GE(accuracy(comm, feedback), kThreshold);
}

TEST(GradDtype, AWrongCastFailsTheAccuracyCheck) {
  coll::Communicator comm(coll::make_mpi_transport(MPI_COMM_WORLD));
  train::TrainOptions o = options("ddp", "bf16");
  o.parallel.wire_cast = train::WireCast::truncated_exponent_test;
  EXPECT_LT(accuracy(comm, o), kThreshold);
}

}  // namespace
