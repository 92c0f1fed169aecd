#include "hpctrain/train/deterministic_sync.hpp"

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>

#include "apply_gradient.hpp"
#include "hpctrain/train/finite_guard.hpp"
#include "training_pass.hpp"
#include "hpctrain/collectives/tree_sum.hpp"
#include "hpctrain/io/epoch_plan.hpp"

namespace hpctrain::train {

namespace {
/// The gradient elements of a bucket, as the tree sum's segment.
coll::BlockRange elements_of(const GradientBucket& b) {
  return coll::BlockRange{static_cast<std::size_t>(b.offset), static_cast<std::size_t>(b.count)};
}

using HostFloats = Kokkos::View<float*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
using ConstHostFloats = Kokkos::View<const float*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
}  // namespace

std::int64_t micro_shard_count(std::int64_t batch_size, std::int64_t micro_shard) {
  return (batch_size + micro_shard - 1) / micro_shard;
}

MicroShardTerms micro_shard_terms(const std::vector<std::int64_t>& batch_sizes, std::int64_t micro_shard, int world) {
  MicroShardTerms t;
  t.ranges.resize(static_cast<std::size_t>(world));
  for (const std::int64_t size : batch_sizes) {
    for (int r = 0; r < world; ++r) {
      const io::RankSlice s = io::granule_slice(size, micro_shard, r, world);
      if (s.count > 0) {
        t.ranges[static_cast<std::size_t>(r)].push_back(coll::TermRange{
            t.total + s.offset / micro_shard, t.total + (s.offset + s.count + micro_shard - 1) / micro_shard});
      }
    }
    t.total += micro_shard_count(size, micro_shard);
  }
  return t;
}

/// Each micro-shard's gradient is a term of a coll::TreeSum over the step's micro-shards.
/// Where the gradient buffer is host memory, each micro-shard's backward writes its gradient
/// straight into storage the sum owns (TreeSum::term_buffer, bound with
/// Sequential::redirect_gradients), which the sum then holds or merges without a copy; the
/// result is written into the model's gradient buffer. With device gradients every term is
/// computed in the model's buffer and copied to the host.
class DeterministicSync::Terms {
 public:
  explicit Terms(models::Sequential<float>& model)
      : model_(model), count_(static_cast<std::size_t>(model.parameter_count())), sum_(count_) {}

  /// Starts a step of `batch_sizes` global batches, cut into micro-shards of `micro_shard`:
  /// every rank's terms are its micro-shards (io::granule_slice), numbered over the step.
  /// Returns the step's number of micro-shards. The terms are recomputed only when the batch
  /// sizes change (at an epoch's last, partial batch and after it).
  std::int64_t begin_step(const std::vector<std::int64_t>& batch_sizes, std::int64_t micro_shard, int rank,
                          int world) {
    if (batch_sizes != batch_sizes_) {
      terms_ = micro_shard_terms(batch_sizes, micro_shard, world);
      batch_sizes_ = batch_sizes;
    }
    sum_.begin(terms_.total, terms_.ranges, rank);
    first_ = true;
    return terms_.total;
  }
  /// Before a micro-shard's forward: points the model's gradients at storage for its term, to
  /// be written, not added to (Sequential::begin_gradients). This rank's first term of the step
  /// goes into the model's gradient buffer, where the sum's merges into it and finish() leave
  /// the result (no copy at P = 1); the others into the sum's storage.
  void start_term() {
    if constexpr (kHostGradients) {
      if (first_) {
        model_.redirect_gradients(core::Vec<float>());
        current_ = model_.gradient_buffer().data();
        first_ = false;
      } else {
        current_ = sum_.term_buffer();
        model_.redirect_gradients(core::Vec<float>(current_, count_));
      }
    }
    model_.begin_gradients();
  }
  /// Whether the sum can finish segments while this rank's last pass is back-propagating
  /// (host gradients: the layers write the term in place).
  static constexpr bool overlaps() { return kHostGradients; }
  /// Before the backward of this rank's last pass of the step (overlaps() only): hands its node
  /// to the sum, whose segments finish_segment() then finishes as the layers write them.
  void collect_last(const coll::TreeNode& node) { sum_.add_last_node(node, current_); }
  /// Collective, non-blocking: finishes gradient elements `segment` into the model's buffer
  /// (after collect_last() and the backward of the segment's layers; overlaps() only).
  void finish_segment(coll::Communicator& comm, coll::BlockRange segment) {
    sum_.finish_segment(comm, model_.gradient_buffer().data(), segment);
  }
  /// After the backward of a pass over an aligned node of micro-shards (one micro-shard: node
  /// {0, term}; grouped passes: several): hands the node's gradient to the sum.
  void collect(const coll::TreeNode& node) {
    if constexpr (kHostGradients) {
      sum_.add_node(node, current_, /*lend=*/true);
      current_ = nullptr;
    } else {
      host_.resize(count_);
      Kokkos::deep_copy(HostFloats(host_.data(), count_), model_.gradient_buffer());
      sum_.add_node(node, host_.data());
    }
  }
  /// Collective: the tree sum over all ranks' micro-shards, written into the model's gradient
  /// buffer (to which the layers' gradient views are bound again): finishes `rest` (the segments
  /// not finished during the backward) and waits for all.
  void finish(coll::Communicator& comm, const std::vector<coll::BlockRange>& rest) {
    const core::Vec<float>& grads = model_.gradient_buffer();
    if constexpr (kHostGradients) {
      model_.redirect_gradients(core::Vec<float>());
      for (const coll::BlockRange& segment : rest) sum_.finish_segment(comm, grads.data(), segment);
      sum_.wait_finished();
    } else {
      host_.resize(count_);
      sum_.finish(comm, host_.data());
      Kokkos::deep_copy(grads, ConstHostFloats(host_.data(), count_));
    }
  }
  const std::vector<coll::TreeSum::SegmentTimes>& segment_times() const noexcept { return sum_.segment_times(); }

 private:
  static constexpr bool kHostGradients = Kokkos::SpaceAccessibility<Kokkos::HostSpace, core::MemSpace>::accessible;

  models::Sequential<float>& model_;
  std::size_t count_;
  coll::TreeSum sum_;
  std::vector<std::int64_t> batch_sizes_;  ///< the step terms_ was computed for
  MicroShardTerms terms_;
  bool first_ = true;          ///< the next term is this rank's first of the step
  float* current_ = nullptr;   ///< host gradients: where the term being computed is
  std::vector<float> host_;    ///< device gradients: the host copy of a term, then of the sum
};

struct DeterministicSync::Pass : TrainingPass {};

bool grouped_deterministic_passes_from_environment() {
  const char* env = std::getenv("HPCTRAIN_DETERMINISTIC_PASSES");
  const std::string v = env == nullptr ? "" : env;
  HPCTRAIN_REQUIRE(v.empty() || v == "grouped" || v == "micro-shard",
                   "HPCTRAIN_DETERMINISTIC_PASSES='" + v + "': expected grouped (the default) or micro-shard");
  return v != "micro-shard";
}

namespace {
/// The model's leaf rows for one grouped pass, off again after it (evaluation and predict run
/// the model on whole batches).
class GradientLeaves {
 public:
  GradientLeaves(models::Sequential<float>& model, std::int64_t rows) : model_(model) { model_.set_gradient_leaves(rows); }
  ~GradientLeaves() { model_.set_gradient_leaves(0); }
  GradientLeaves(const GradientLeaves&) = delete;
  GradientLeaves& operator=(const GradientLeaves&) = delete;

 private:
  models::Sequential<float>& model_;
};
}  // namespace

DeterministicSync::DeterministicSync(coll::Communicator& comm, models::Sequential<float>& model,
                                     std::int64_t micro_shard, Timeline* timeline, const DataParallelOptions& parallel)
    : comm_(comm), model_(model), trainable_(optimiser_mask(model)), micro_shard_(micro_shard), timeline_(timeline),
      terms_(std::make_unique<Terms>(model)), pass_(std::make_unique<Pass>()),
      grouped_(model.supports_gradient_leaves() && grouped_deterministic_passes_from_environment()) {
  // The tree sum's segments: DataParallel's buckets, when they tile the gradient buffer.
  std::vector<GradientBucket> buckets = plan_gradient_buckets(model.parameter_info(), parallel);
  std::int64_t end = model.parameter_count();
  for (const GradientBucket& b : buckets) {
    if (b.offset + b.count != end) {
      buckets.assign(1, GradientBucket{0, model.parameter_count(), 0});
      break;
    }
    end = b.offset;
  }
  segments_ = std::move(buckets);
}

DeterministicSync::~DeterministicSync() = default;

void DeterministicSync::begin_step(const OptimizerStep& step) {
  step_ = step;
  micro_ = 0;
  term_base_ = 0;
  next_segment_ = 0;
  total_terms_ = terms_->begin_step(step.batch_sizes, micro_shard_, comm_.rank(), comm_.size());
  losses_.assign(static_cast<std::size_t>(total_terms_), 0.0);
}

void DeterministicSync::accumulate(const MicroBatch& micro) {
  const auto t_start = std::chrono::steady_clock::now();
  const std::size_t count = micro.batch.count;
  const bool last_micro_batch = micro_ + 1 == step_.batch_sizes.size();
  if (grouped_) {
    accumulate_grouped(micro, last_micro_batch);
  } else {
    const auto shard = static_cast<std::size_t>(micro_shard_);
    for (std::size_t first = 0; first < count; first += shard) {
      const std::size_t rows = std::min(shard, count - first);
      pass_->take_rows(micro, first, rows, model_.input_shape());
      terms_->start_term();
      const auto position = static_cast<std::int64_t>(first);
      const std::int64_t term = term_base_ + (micro.offset_in_batch + position) / micro_shard_;
      losses_[static_cast<std::size_t>(term)] =
          pass_->forward_loss(model_, step_.index, micro.sample_position + position, step_.samples());
      backward_and_collect(coll::TreeNode{0, term}, last_micro_batch && first + shard >= count);
    }
  }
  term_base_ += micro_shard_count(step_.batch_sizes.at(micro_++), micro_shard_);
  Kokkos::fence();
  backward_end_ = std::chrono::steady_clock::now();
  record_ = micro.record && timeline_;
  if (record_) timeline_->add(Span{"micro-shards forward/backward", "compute", 0, t_start, backward_end_});
}

void DeterministicSync::backward_and_collect(const coll::TreeNode& node, bool last) {
  if (!last || !Terms::overlaps()) {
    model_.backward(pass_->dlogits, false);
    terms_->collect(node);
    return;
  }
  // This rank's last pass of the step: the sum finishes each segment (a bucket of layers) as
  // soon as the backward has written it, overlapping the rest of the backward.
  terms_->collect_last(node);
  model_.backward(pass_->dlogits, false, [this](std::size_t layer_done) {
    while (next_segment_ < segments_.size() && segments_[next_segment_].ready_after_layer >= layer_done) {
      Kokkos::fence();
      terms_->finish_segment(comm_, elements_of(segments_[next_segment_++]));
    }
  });
}

void DeterministicSync::accumulate_grouped(const MicroBatch& micro, bool last_micro_batch) {
  const auto count = static_cast<std::int64_t>(micro.batch.count);
  if (count == 0) return;
  // This micro-batch's micro-shards on this rank, [first_term, end_term), as aligned nodes.
  const std::int64_t first_term = term_base_ + micro.offset_in_batch / micro_shard_;
  const std::int64_t end_term = first_term + micro_shard_count(count, micro_shard_);
  const GradientLeaves leaves(model_, micro_shard_);
  const std::vector<coll::TreeNode> nodes = coll::maximal_nodes({coll::TermRange{first_term, end_term}}, total_terms_);
  for (const coll::TreeNode& node : nodes) {
    const std::int64_t node_first = node.index << node.level;
    const std::int64_t node_end = std::min((node.index + 1) << node.level, total_terms_);
    HPCTRAIN_REQUIRE(node_first >= first_term && node_end <= end_term,
                     "deterministic training: node of micro-shards [" + std::to_string(node_first) + ", " +
                         std::to_string(node_end) + ") outside this rank's [" + std::to_string(first_term) + ", " +
                         std::to_string(end_term) + ")");
    const std::int64_t first = (node_first - first_term) * micro_shard_;
    const std::int64_t rows = std::min(count, (node_end - first_term) * micro_shard_) - first;
    pass_->take_rows(micro, static_cast<std::size_t>(first), static_cast<std::size_t>(rows), model_.input_shape());
    terms_->start_term();
    pass_->forward_leaf_losses(model_, step_.index, micro.sample_position + first, step_.samples(), micro_shard_,
                               losses_.data() + node_first);
    backward_and_collect(node, last_micro_batch && &node == &nodes.back());
  }
}

double DeterministicSync::finish_step() {
  const auto t_sum = std::chrono::steady_clock::now();
  std::vector<coll::BlockRange> rest;
  for (; next_segment_ < segments_.size(); ++next_segment_) rest.push_back(elements_of(segments_[next_segment_]));
  terms_->finish(comm_, rest);
  for (const auto& t : terms_->segment_times()) overlap_observed_ = overlap_observed_ || t.started < backward_end_;
  // One slot per micro-shard, exact all-reduce (one non-zero term per slot), summed in
  // micro-shard order; rank 0 holds the whole loss, so the ranks' shares sum to it.
  comm_.allreduce(losses_.data(), losses_.size(), coll::ReduceOp::sum);
  double total = 0.0;
  for (const double l : losses_) total += l;
  loss_ = comm_.rank() == 0 ? total : 0.0;
  const auto t_end = std::chrono::steady_clock::now();
  if (record_) {
    timeline_->add(Span{"tree gradient sum (wait)", "allreduce", 0, t_sum, t_end});
    for (const auto& t : terms_->segment_times()) {
      timeline_->add(Span{"tree sum segment (" + std::to_string(t.segment.count * sizeof(float) / 1024) + " KiB)",
                          "allreduce", 1, t.started, t.finished});
    }
  }
  return std::chrono::duration<double>(t_end - t_sum).count();
}

double DeterministicSync::apply(core::Optimizer<float>& optimizer, double lr, double clip_norm) {
  apply_full_gradient(model_, optimizer, lr, clip_norm, trainable_);
  return 0.0;
}

GradientSync::HeldBytes DeterministicSync::held_bytes() const { return full_gradient_held_bytes(model_, trainable_); }

std::int64_t DeterministicSync::count_nonfinite_gradient() const {
  return count_nonfinite_in_my_block(model_.gradient_buffer(), comm_.rank(), comm_.size());
}

}  // namespace hpctrain::train
