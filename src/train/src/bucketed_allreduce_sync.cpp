#include "hpctrain/train/bucketed_allreduce_sync.hpp"

#include <Kokkos_Core.hpp>

#include "apply_gradient.hpp"
#include "hpctrain/train/finite_guard.hpp"
#include "training_pass.hpp"

namespace hpctrain::train {

struct BucketedAllreduceSync::Pass : TrainingPass {};

BucketedAllreduceSync::BucketedAllreduceSync(coll::Communicator& comm, models::Sequential<float>& model,
                                             DataParallelOptions options, Timeline* timeline, ReduceEvery every,
                                             std::function<void()> between_micro_batches)
    : model_(model), trainable_(optimiser_mask(model)), rank_(comm.rank()), ranks_(comm.size()), timeline_(timeline), data_parallel_(comm, model, options, timeline),
      pass_(std::make_unique<Pass>()), every_(every), between_micro_batches_(std::move(between_micro_batches)) {}

BucketedAllreduceSync::~BucketedAllreduceSync() = default;

void BucketedAllreduceSync::begin_step(const OptimizerStep& step) {
  // The layers that can write their gradients in the step's first backward instead of adding
  // them (dense: a gemm with beta 0); only the others' slices are zeroed. Saves a pass over the
  // whole gradient buffer per step. A rank whose step has no samples zeroes in accumulate().
  model_.begin_gradients();
  gradients_pending_ = true;
  step_ = step;
  micro_ = 0;
  loss_ = 0.0;
  waited_s_ = 0.0;
  waited_between_micro_batches_s_ = 0.0;
}

void BucketedAllreduceSync::wait_for_reduction() {
  waited_s_ += data_parallel_.finish();
  record_overlap();
}

void BucketedAllreduceSync::record_overlap() {
  for (const auto& span : data_parallel_.last_step_spans()) {
    if (span.first < backward_end_ && last_had_samples_) overlap_observed_ = true;
  }
}

void BucketedAllreduceSync::accumulate(const MicroBatch& micro) {
  using Clock = std::chrono::steady_clock;
  const bool last = ++micro_ == step_.batch_sizes.size();
  const bool every = every_ == ReduceEvery::micro_batch;
  // The previous micro-batch's reduction must be done (and the buffer prepared) before this
  // one's backward adds into the same buffer.
  if (every && micro_ > 1) {
    const double before = waited_s_;
    wait_for_reduction();
    waited_between_micro_batches_s_ += waited_s_ - before;
    if (between_micro_batches_) {
      between_micro_batches_();
    } else {
      model_.zero_gradients();
    }
  }
  data_parallel_.begin_step(/*sync=*/last || every);
  const auto t_forward = Clock::now();
  backward_end_ = t_forward;
  last_had_samples_ = micro.batch.count > 0;
  if (!last_had_samples_) {
    // No backward writes this step's gradients yet: they must be zero before the buckets go.
    if (gradients_pending_) model_.zero_gradients();
    gradients_pending_ = false;
    model_.skip_stat_reductions();  // sync batch norm: the ranks with samples wait for ours
    return;                         // its buckets are launched by finish()
  }
  pass_->take_rows(micro, 0, micro.batch.count, model_.input_shape());
  loss_ += pass_->forward_loss(model_, step_.index, micro.sample_position, step_.samples());
  const auto t_backward = Clock::now();
  if (micro.record && timeline_) timeline_->add(Span{"forward", "compute", 0, t_forward, t_backward});
  model_.backward(pass_->dlogits, false, data_parallel_.backward_hook());
  gradients_pending_ = false;
  Kokkos::fence();
  backward_end_ = Clock::now();
  if (micro.record && timeline_) timeline_->add(Span{"backward", "compute", 0, t_backward, backward_end_});
}

double BucketedAllreduceSync::finish_step() {
  wait_for_reduction();
  return waited_s_;
}

double BucketedAllreduceSync::apply(core::Optimizer<float>& optimizer, double lr, double clip_norm) {
  apply_full_gradient(model_, optimizer, lr, clip_norm, trainable_);
  return 0.0;
}

GradientSync::HeldBytes BucketedAllreduceSync::held_bytes() const {
  HeldBytes held = full_gradient_held_bytes(model_, trainable_);
  held.gradients += data_parallel_.residual_bytes();
  return held;
}

std::int64_t BucketedAllreduceSync::count_nonfinite_gradient() const {
  return count_nonfinite_in_my_block(model_.gradient_buffer(), rank_, ranks_);
}

}  // namespace hpctrain::train
