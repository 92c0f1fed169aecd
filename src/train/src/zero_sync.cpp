#include "hpctrain/train/zero_sync.hpp"

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "hpctrain/core/elementwise.hpp"
#include "hpctrain/train/finite_guard.hpp"
#include "hpctrain/base/error.hpp"
#include "hpctrain/train/deterministic_sync.hpp"
#include "shared_state_sums.hpp"

namespace hpctrain::train {

namespace {

std::unique_ptr<GradientSync> make_inner(coll::Communicator& comm, models::Sequential<float>& model,
                                         const ZeroOptions& o, Timeline* timeline, const ShardLayout& layout) {
  if (o.deterministic) return std::make_unique<DeterministicSync>(comm, model, o.micro_shard, timeline, o.parallel);
  DataParallelOptions p = o.parallel;
  p.reduction = BucketReduction::reduce_scatter;
  if (o.stage == 1) return std::make_unique<BucketedAllreduceSync>(comm, model, p, timeline);
  // zero2: every micro-batch is reduce-scattered; this rank's summed blocks stay where the
  // reduce-scatter left them and everything else is cleared, so the next backward adds its
  // gradient onto the sum in the owned blocks and onto zeros elsewhere, and the next
  // reduce-scatter gives the owner sum + Σ this micro-batch. No second buffer.
  const core::Vec<float> grads = model.gradient_buffer();
  return std::make_unique<BucketedAllreduceSync>(comm, model, p, timeline, ReduceEvery::micro_batch,
                                                 [&layout, grads] { layout.clear_unowned(grads); });
}

}  // namespace

ZeroSync::ZeroSync(coll::Communicator& comm, models::Sequential<float>& model, const ZeroOptions& options,
                   Timeline* timeline)
    : comm_(comm),
      model_(model),
      options_(options),
      timeline_(timeline),
      buckets_(plan_gradient_buckets(model.parameter_info(), options.parallel)),
      layout_(buckets_, comm.size(), comm.rank()) {
  HPCTRAIN_REQUIRE(options.stage == 1 || options.stage == 2,
                   "ZeroSync: stage must be 1 or 2, got " + std::to_string(options.stage));
  HPCTRAIN_REQUIRE(!(options.stage == 2 && options.deterministic),
                   "--strategy zero2 cannot run with --deterministic (the tree sum keeps every micro-shard's "
                   "whole gradient, so there is no gradient shard to keep): use --strategy zero1");
  const std::pair<std::int64_t, std::int64_t> front{0, layout_.shard_count()};
  // The shards live at the front of the model's own buffers (ShardLayout::compact): no copies.
  param_shard_ = Kokkos::subview(model.parameter_buffer(), front);
  grad_shard_ = Kokkos::subview(model.gradient_buffer(), front);
  inner_ = make_inner(comm, model, options_, timeline, layout_);
  // The optimiser steps the shard: the model's trainable mask, compacted as the parameters are.
  if (model.has_state()) {
    const core::Vec<float> mask = model.trainable_mask();
    layout_.compact(mask);
    trainable_shard_ = core::Vec<float>("trainable shard", layout_.shard_count());
    Kokkos::deep_copy(trainable_shard_, Kokkos::subview(mask, front));
  }
  // Deterministic mode has the whole summed gradient, state slots included, on every rank.
  if (!options.deterministic && model.has_state()) {
    state_sums_ = std::make_unique<SharedStateSums>(model, layout_);
  }
  // The parameter all-gathers go in the order the forward needs them: by the bucket's first layer.
  gather_order_.resize(buckets_.size());
  for (std::size_t i = 0; i < gather_order_.size(); ++i) gather_order_[i] = i;
  std::stable_sort(gather_order_.begin(), gather_order_.end(), [this](std::size_t a, std::size_t b) {
    return buckets_[a].ready_after_layer < buckets_[b].ready_after_layer;
  });
  model_.set_before_layer_forward([this](std::size_t layer) { before_layer_forward(layer); });
}

ZeroSync::~ZeroSync() {
  model_.set_before_layer_forward({});
  // The model's buffer must not be written after it may be gone: the queued all-gathers end
  // first (an error there was or will be reported by the call that failed; nothing to add).
  try {
    wait_for_parameters(SIZE_MAX);
  } catch (...) {  // NOLINT(bugprone-empty-catch): destructor; the cause is reported elsewhere
  }
}

void ZeroSync::begin_step(const OptimizerStep& step) {
  inner_->begin_step(step);
  forward_wait_s_ = 0.0;
  record_ = timeline_ != nullptr && timeline_->enabled();
}

double ZeroSync::finish_step() {
  // This rank's blocks of the summed gradient are in the model's gradient buffer at their
  // places (apply() moves them to its front); zero2 has summed every micro-batch into them.
  // Deterministic mode has the whole exact gradient. A rank whose forward did not run (no
  // samples in the step) still waits for the parameters here.
  const double reduced = inner_->finish_step();
  // forward_wait_s_ is the part inside accumulate() (waited_inside_accumulate); this wait is not.
  return reduced + forward_wait_s_ + wait_for_parameters(SIZE_MAX);
}

std::int64_t ZeroSync::count_nonfinite_gradient() const {
  if (options_.deterministic) return count_nonfinite_in_my_block(model_.gradient_buffer(), comm_.rank(), comm_.size());
  std::int64_t bad = 0;
  for (const ShardRange& r : layout_.ranges()) {
    if (r.count == 0) continue;
    bad += core::count_nonfinite<float>(
        Kokkos::subview(model_.gradient_buffer(), std::make_pair(r.global_offset, r.global_offset + r.count)));
  }
  return bad;
}

double ZeroSync::apply(core::Optimizer<float>& optimizer, double lr, double clip_norm) {
  // The state slots' sums to every rank (out of the shard, so the norm below leaves them out),
  // then the running statistics of the whole model, on every rank, as ddp does.
  // finish_step() has waited for the parameters: the optimiser may read and write them.
  double waited = 0;
  if (state_sums_) waited += state_sums_->share(comm_, model_.gradient_buffer());
  model_.update_state();  // leaves the state's gradient slots zero: the norm below leaves them out
  if (options_.deterministic) {
    // The whole exact gradient is on every rank: the norm as ddp --deterministic takes it,
    // then the (scaled) owned elements.
    if (clip_norm > 0) core::clip_grad_norm(model_.gradient_buffer(), clip_norm);
    layout_.compact(model_.gradient_buffer());
  } else {
    layout_.compact(model_.gradient_buffer());
    if (clip_norm > 0) {
      core::clip_grad_norm(grad_shard_, clip_norm, [this](double local) {
        comm_.allreduce(&local, 1, coll::ReduceOp::sum);
        return local;
      });
    }
  }
  // The owned parameters to the buffer's front, stepped there (the state entries left alone:
  // the shard's trainable mask), and back to their places; the all-gather then rewrites every
  // other element.
  layout_.compact(model_.parameter_buffer());
  optimizer.set_trainable_mask(trainable_shard_);
  optimizer.set_learning_rate(lr);
  optimizer.step(param_shard_, grad_shard_);
  layout_.expand(model_.parameter_buffer());
  Kokkos::fence();
  launch_parameter_all_gather();
  return waited;
}

void ZeroSync::launch_parameter_all_gather() {
  float* params = model_.parameter_buffer().data();
  gathers_.clear();
  gathers_done_ = 0;
  gathers_.reserve(buckets_.size());
  for (const std::size_t i : gather_order_) {
    const GradientBucket& b = buckets_[i];
    gathers_.push_back(comm_.iallgather_in_place(params + b.offset, static_cast<std::size_t>(b.count),
                                                 coll::DataType::f32, options_.parallel.algorithm));
  }
}

double ZeroSync::wait_for_parameters(std::size_t layer) {
  if (gathers_done_ == gathers_.size()) return 0.0;
  const auto start = std::chrono::steady_clock::now();
  while (gathers_done_ < gathers_.size() && buckets_[gather_order_[gathers_done_]].ready_after_layer <= layer) {
    gathers_[gathers_done_++].wait();
  }
  if (gathers_done_ == gathers_.size() && record_) {
    timeline_->add(Span{"parameter all-gather", "allgather", 1, gathers_.front().started_at(), gathers_.back().finished_at()});
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double ZeroSync::await_parameters() { return wait_for_parameters(SIZE_MAX); }

void ZeroSync::before_layer_forward(std::size_t layer) {
  forward_wait_s_ += wait_for_parameters(layer);
  if (gathers_done_ < gathers_.size() && !gathers_.back().test()) gather_overlap_observed_ = true;
}

GradientSync::HeldBytes ZeroSync::held_bytes() const {
  const auto full = static_cast<std::uint64_t>(model_.parameter_count()) * sizeof(float);
  const std::uint64_t state = (state_sums_ ? state_sums_->bytes() : 0) + trainable_shard_.extent(0) * sizeof(float);
  // Error feedback's residuals cover every bucket (each rank rounds its whole gradient).
  const std::uint64_t residual = options_.parallel.error_feedback && !options_.deterministic ? full : 0;
  return HeldBytes{full, full + state + residual};
}

}  // namespace hpctrain::train
