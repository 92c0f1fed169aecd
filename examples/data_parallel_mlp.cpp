// Data-parallel training with the library: each rank runs its share of every global batch of
// Fashion-MNIST through an MLP, DataParallel sums the gradients over the ranks while backward
// runs, SGD steps, and the parameters end in a checkpoint. Exits 0 only if the mean loss fell,
// every rank holds the same parameters and the checkpoint verifies. Run: mpirun -n 2 data_parallel_mlp CHECKPOINT_DIR
#include <cstdio>

#include "hpctrain/collectives/mpi_transport.hpp"
#include "hpctrain/core/environment.hpp"
#include "hpctrain/core/optimizer.hpp"
#include "hpctrain/io/checkpoint.hpp"
#include "hpctrain/io/fashion_mnist_cache.hpp"
#include "hpctrain/io/prefetcher.hpp"
#include "hpctrain/models/registry.hpp"
#include "hpctrain/train/data_parallel.hpp"
#include "hpctrain/train/device_batch.hpp"
#include "hpctrain/train/trainer.hpp"

using namespace hpctrain;

int main(int argc, char** argv) {
  Environment env(argc, argv);  // MPI, then Kokkos
  coll::Communicator comm(coll::make_mpi_transport(MPI_COMM_WORLD));
  const io::DatasetReader data(io::ensure_fashion_mnist("train", comm));
  const io::EpochPlan plan(data.info().count, /*global_batch=*/128, comm.rank(), comm.size(), /*seed=*/1, true);
  auto model = models::build_model<float>({{"name", "mlp"}});
  train::DataParallel dp(comm, *model);
  dp.broadcast_parameters();  // every rank starts from rank 0's parameters
  core::Sgd<float> sgd(core::SgdOptions{/*lr=*/0.05, /*momentum=*/0.9});
  train::DeviceBatch input;
  core::Tensor<float> dlogits;
  double first_loss = 0.0, loss = 0.0;
  for (std::int64_t b = 0; b < 40; ++b) {
    input.load(io::read_batch(data, plan, /*epoch=*/0, b), model->input_shape());
    model->zero_gradients();
    dp.begin_step(/*sync=*/true);
    core::Tensor<float> logits = model->forward(input.x, /*train=*/true);
    core::ensure_shape(dlogits, "dlogits", logits.shape);
    loss = core::softmax_cross_entropy(logits, input.labels, plan.global_batch_size(b), dlogits);
    model->backward(dlogits, false, dp.backward_hook());  // launches bucket all-reduces
    dp.finish();  // gradient buffer = sum over ranks = gradient of the global mean loss
    sgd.step(model->parameter_buffer(), model->gradient_buffer());
    comm.allreduce(&loss, 1, coll::ReduceOp::sum);  // the ranks' shares sum to the mean loss
    if (b == 0) first_loss = loss;
  }
  const std::vector<float> host = core::to_host(model->parameter_buffer());
  std::vector<io::CheckpointTensor> tensors;
  for (const auto& p : model->parameter_info()) tensors.push_back({"params/" + p.name, p.shape, host.data() + p.offset});
  const auto saved = io::write_checkpoint(comm, argc > 1 ? argv[1] : "checkpoints", 40, {{"example", "mlp"}}, tensors, 1);
  std::int64_t checksum[2] = {static_cast<std::int64_t>(train::parameter_checksum(host.data(), host.size()))};
  checksum[1] = checksum[0];
  comm.allreduce(&checksum[0], 1, coll::ReduceOp::min);
  comm.allreduce(&checksum[1], 1, coll::ReduceOp::max);
  const bool ok = loss < 0.7 * first_loss && checksum[0] == checksum[1] && io::verify_checkpoint(saved.path).empty();
  if (comm.rank() == 0) std::printf("loss %.4f -> %.4f, checkpoint %s: %s\n", first_loss, loss, saved.path.c_str(), ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
