#include "hpctrain/train/evaluation.hpp"

#include <vector>

#include "hpctrain/core/loss.hpp"
#include "hpctrain/io/epoch_plan.hpp"
#include "hpctrain/io/prefetcher.hpp"
#include "hpctrain/train/device_batch.hpp"

namespace hpctrain::train {

// Batches of 256: the CNN's im2col workspace grows with the batch, and at 1000 its second
// conv alone needs 627 MB twice. The slots cost one all-reduce of a few hundred bytes.
EvalResult evaluate(models::Sequential<float>& model, const io::DatasetReader& reader, coll::Communicator& comm) {
  const std::int64_t n = reader.info().count;
  io::EpochPlan plan(n, 256, 0, 1, 0, /*drop_last=*/false, /*shuffle=*/false);
  const std::int64_t batches = plan.batches_per_epoch();
  std::vector<double> loss(static_cast<std::size_t>(batches), 0.0);
  std::vector<std::int64_t> correct(static_cast<std::size_t>(batches), 0);
  DeviceBatch device;
  core::Tensor<float> dlogits;
  for (std::int64_t b = comm.rank(); b < batches; b += comm.size()) {
    io::Batch batch = io::read_batch(reader, plan, 0, b);
    if (batch.count == 0) continue;
    device.load(batch, model.input_shape());
    core::Tensor<float> logits = model.forward(device.x, /*train=*/false);
    core::ensure_shape(dlogits, "hpctrain::eval::dlogits", logits.shape);
    const auto rows = static_cast<std::int64_t>(batch.count);
    const auto slot = static_cast<std::size_t>(b);
    loss[slot] = core::softmax_cross_entropy(logits, device.labels, rows, dlogits) * static_cast<double>(rows);
    correct[slot] = core::count_correct(logits, device.labels);
  }
  comm.allreduce(loss.data(), loss.size(), coll::ReduceOp::sum);
  comm.allreduce(correct.data(), correct.size(), coll::ReduceOp::sum);
  EvalResult r;
  r.samples = n;
  double loss_sum = 0.0;
  std::int64_t right = 0;
  for (std::size_t b = 0; b < loss.size(); ++b) {
    loss_sum += loss[b];
    right += correct[b];
  }
  if (n > 0) {
    r.loss = loss_sum / static_cast<double>(n);
    r.accuracy = static_cast<double>(right) / static_cast<double>(n);
  }
  return r;
}

}  // namespace hpctrain::train
