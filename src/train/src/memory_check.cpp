#include "hpctrain/train/memory_check.hpp"

#include <algorithm>
#include <string>

#include <fmt/format.h>

#include "hpctrain/collectives/error.hpp"
#include "hpctrain/core/conv.hpp"
#include "hpctrain/train/deterministic_sync.hpp"
#include "hpctrain/io/system_memory.hpp"

namespace hpctrain::train {

namespace {

// evaluate() reads batches of this many samples (evaluation.cpp).
constexpr std::int64_t kEvalBatch = 256;

std::uint64_t product(const core::Shape& s) {
  std::uint64_t n = 1;
  for (const auto d : s) n *= static_cast<std::uint64_t>(d);
  return n;
}

/// A layer's share of activations and workspace for `batch` samples whose input is `in`.
void add_layer(models::Layer<float>& layer, const core::Shape& in, const core::Shape& out, std::uint64_t batch,
               MemoryEstimate& e) {
  const std::uint64_t out_elements = product(out) * batch;
  e.activations += 2 * out_elements * sizeof(float);  // kept for backward + the gradient flowing back
  const std::string kind = layer.kind();
  if (kind == "maxpool2d") e.activations += out_elements * sizeof(std::int64_t);  // argmax
  if (kind == "conv2d" && in.size() == 3 && out.size() == 3) {
    const auto specs = layer.parameter_specs();
    const core::Shape& w = specs.at(0).shape;  // [F, C, K, K]
    const std::uint64_t weights = product(w);
    if (core::conv_backend() == core::ConvBackend::onednn) {
      // Direct convolutions on blocked layouts: reordered copies of the weights, the input and
      // the output, and of their gradients (its scratchpads are per thread and small).
      e.workspace += 2 * (weights + product(in) * batch + out_elements) * sizeof(float);
    } else {
      // im2col: col and dcol (C K K x N Ho Wo each) and the output transpose (F x N Ho Wo).
      const std::uint64_t col_rows = w.size() == 4 ? static_cast<std::uint64_t>(w[1] * w[2] * w[3]) : 0;
      const std::uint64_t col_cols = batch * static_cast<std::uint64_t>(out[1] * out[2]);
      e.workspace += (2 * col_rows + static_cast<std::uint64_t>(out[0])) * col_cols * sizeof(float);
    }
  }
}

}  // namespace

std::uint64_t MemoryEstimate::total() const noexcept {
  return parameters + gradients + optimizer_state + activations + workspace + data;
}

std::string MemoryEstimate::breakdown() const {
  const auto b = [](std::uint64_t v) { return io::format_bytes(static_cast<double>(v)); };
  return fmt::format("parameters {}, gradients {}, optimiser state {}, activations {}, convolution workspace {} "
                     "({}), prefetched data {}; batch {} per rank",
                     b(parameters), b(gradients), b(optimizer_state), b(activations), b(workspace),
                     core::conv_backend_name(core::conv_backend()), b(data), batch);
}

MemoryEstimate estimate_training_memory(models::Sequential<float>& model, const TrainOptions& o, int world,
                                        bool with_eval) {
  MemoryEstimate e;
  const auto params = static_cast<std::uint64_t>(model.parameter_count());
  const auto ranks = static_cast<std::uint64_t>(std::max(world, 1));
  e.parameters = params * sizeof(float);
  e.gradients = params * sizeof(float);
  const std::uint64_t copies = o.optimizer == "adamw" ? 2 : (o.momentum != 0.0 ? 1 : 0);
  const bool zero = o.strategy == "zero1" || o.strategy == "zero2";
  e.optimizer_state = copies * (zero ? (params + ranks - 1) / ranks : params) * sizeof(float);
  if (o.deterministic) {  // the tree sum's held nodes and received blocks, on the rank that needs most
    const std::vector<std::int64_t> batches(static_cast<std::size_t>(std::max<std::int64_t>(o.accumulate, 1)),
                                            o.global_batch);
    const MicroShardTerms terms = micro_shard_terms(batches, o.micro_shard, static_cast<int>(ranks));
    std::size_t most = 0;
    for (int r = 0; r < static_cast<int>(ranks); ++r) {
      most = std::max(most,
                      coll::TreeSum::workspace_floats(static_cast<std::size_t>(params), terms.total, terms.ranges, r,
                                                                /*term_buffers=*/true));
    }
    e.optimizer_state += most * sizeof(float);
  }

  const std::int64_t rank_batch = (o.global_batch + static_cast<std::int64_t>(ranks) - 1) / static_cast<std::int64_t>(ranks);
  const std::int64_t train_batch = o.deterministic ? o.micro_shard : rank_batch;
  e.batch = std::max<std::int64_t>(train_batch, with_eval ? kEvalBatch : 0);
  const auto batch = static_cast<std::uint64_t>(std::max<std::int64_t>(e.batch, 1));
  core::Shape in = model.input_shape();
  e.activations = 2 * product(in) * batch * sizeof(float);  // the batch on the device, and its copy in
  // the trainer's copies of the rank's micro-batch and of the next one (trainer.cpp, BatchesAhead)
  e.activations += 2 * product(in) * static_cast<std::uint64_t>(std::max<std::int64_t>(rank_batch, 1)) * sizeof(float);
  for (std::size_t l = 0; l < model.layer_count(); ++l) {
    const core::Shape out = model.layer(l).output_shape(in);
    add_layer(model.layer(l), in, out, batch, e);
    in = out;
  }
  e.data = static_cast<std::uint64_t>(o.prefetch_depth) * static_cast<std::uint64_t>(std::max<std::int64_t>(train_batch, 1)) *
           (product(model.input_shape()) * sizeof(float) + sizeof(std::int32_t));
  return e;
}

void require_memory_fits(coll::Communicator& comm, const MemoryEstimate& estimate, int ranks_on_node) {
  const io::AvailableMemory available = io::available_memory();
  const auto ranks = static_cast<std::uint64_t>(std::max(ranks_on_node, 1));
  const std::uint64_t need = ranks * estimate.total();
  const bool fits = !available.known() || need <= available.bytes;
  std::int64_t first_failing = fits ? comm.size() : comm.rank();
  comm.allreduce(&first_failing, 1, coll::ReduceOp::min);
  if (first_failing == comm.size()) return;
  const std::string message = fmt::format(
      "this training run needs an estimated {} of memory per rank ({}){}, more than the {} available on this node "
      "({}): it would be killed by the kernel's OOM killer. Reduce --global-batch, the model's size (kernel, "
      "channels, hidden) or the ranks per node",
      io::format_bytes(static_cast<double>(estimate.total())), estimate.breakdown(),
      ranks > 1 ? fmt::format(", {} for the {} ranks on this node", io::format_bytes(static_cast<double>(need)), ranks)
                : std::string(),
      io::format_bytes(static_cast<double>(available.bytes)), available.source);
  if (comm.rank() == first_failing) HPCTRAIN_FAIL(message);
  throw PeerReportedError("rank " + std::to_string(first_failing) + " refused the run: not enough memory", __FILE__,
                          __LINE__);
}

}  // namespace hpctrain::train
