#include "hpctrain/train/deterministic_sync.hpp"

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <chrono>

#include "apply_gradient.hpp"
#include "hpctrain/train/finite_guard.hpp"
#include "training_pass.hpp"
#include "hpctrain/collectives/tree_sum.hpp"
#include "hpctrain/io/epoch_plan.hpp"

namespace hpctrain::train {

namespace {
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
/// Where the gradient buffer is host memory, a term stays in it until the next micro-shard
/// needs the buffer and is then added (or copied) out; the step's last term is lent to the sum
/// and the result written over it. With device gradients every term is copied to the host first.
class DeterministicSync::Terms {
 public:
  explicit Terms(const models::Sequential<float>& model)
      : count_(static_cast<std::size_t>(model.parameter_count())), sum_(count_) {}

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
    pending_ = -1;
    return terms_.total;
  }
  /// After micro-shard `term`'s backward (the gradient buffer holds only its gradient).
  void collect(std::int64_t term, const core::Vec<float>& grads) {
    if constexpr (kHostGradients) {
      pending_ = term;
    } else {
      host_.resize(count_);
      Kokkos::deep_copy(HostFloats(host_.data(), count_), grads);
      sum_.add(term, host_.data());
    }
  }
  /// Before the gradient buffer is zeroed for the next micro-shard: adds the term it holds.
  void keep(const core::Vec<float>& grads) {
    if (pending_ < 0) return;
    sum_.add(pending_, grads.data());
    pending_ = -1;
  }
  /// Collective: the tree sum over all ranks' micro-shards, written into `grads`.
  void finish(coll::Communicator& comm, const core::Vec<float>& grads) {
    if constexpr (kHostGradients) {
      if (pending_ >= 0) sum_.add(pending_, grads.data(), /*lend=*/true);
      pending_ = -1;
      sum_.finish(comm, grads.data());
    } else {
      host_.resize(count_);
      sum_.finish(comm, host_.data());
      Kokkos::deep_copy(grads, ConstHostFloats(host_.data(), count_));
    }
  }

 private:
  static constexpr bool kHostGradients = Kokkos::SpaceAccessibility<Kokkos::HostSpace, core::MemSpace>::accessible;

  std::size_t count_;
  coll::TreeSum sum_;
  std::vector<std::int64_t> batch_sizes_;  ///< the step terms_ was computed for
  MicroShardTerms terms_;
  std::int64_t pending_ = -1;  ///< a term still in the gradient buffer (host gradients), or -1
  std::vector<float> host_;    ///< device gradients: the host copy of a term, then of the sum
};

struct DeterministicSync::Pass : TrainingPass {};

DeterministicSync::DeterministicSync(coll::Communicator& comm, models::Sequential<float>& model,
                                     std::int64_t micro_shard, Timeline* timeline)
    : comm_(comm), model_(model), trainable_(optimiser_mask(model)), micro_shard_(micro_shard), timeline_(timeline),
      terms_(std::make_unique<Terms>(model)), pass_(std::make_unique<Pass>()) {}

DeterministicSync::~DeterministicSync() = default;

void DeterministicSync::begin_step(const OptimizerStep& step) {
  model_.zero_gradients();
  step_ = step;
  micro_ = 0;
  term_base_ = 0;
  const std::int64_t terms = terms_->begin_step(step.batch_sizes, micro_shard_, comm_.rank(), comm_.size());
  losses_.assign(static_cast<std::size_t>(terms), 0.0);
}

void DeterministicSync::accumulate(const MicroBatch& micro) {
  const auto t_start = std::chrono::steady_clock::now();
  const auto shard = static_cast<std::size_t>(micro_shard_);
  const std::size_t count = micro.batch.count;
  for (std::size_t first = 0; first < count; first += shard) {
    const std::size_t rows = std::min(shard, count - first);
    pass_->input.load_rows(micro.batch, first, rows, model_.input_shape());
    terms_->keep(model_.gradient_buffer());
    model_.zero_gradients();
    const auto position = static_cast<std::int64_t>(first);
    const std::int64_t term = term_base_ + (micro.offset_in_batch + position) / micro_shard_;
    losses_[static_cast<std::size_t>(term)] =
        pass_->forward_loss(model_, step_.index, micro.sample_position + position, step_.samples());
    model_.backward(pass_->dlogits, false);
    terms_->collect(term, model_.gradient_buffer());
  }
  term_base_ += micro_shard_count(step_.batch_sizes.at(micro_++), micro_shard_);
  Kokkos::fence();
  record_ = micro.record && timeline_;
  if (record_) {
    timeline_->add(Span{"micro-shards forward/backward", "compute", 0, t_start, std::chrono::steady_clock::now()});
  }
}

double DeterministicSync::finish_step() {
  const auto t_sum = std::chrono::steady_clock::now();
  terms_->finish(comm_, model_.gradient_buffer());
  // One slot per micro-shard, exact all-reduce (one non-zero term per slot), summed in
  // micro-shard order; rank 0 holds the whole loss, so the ranks' shares sum to it.
  comm_.allreduce(losses_.data(), losses_.size(), coll::ReduceOp::sum);
  double total = 0.0;
  for (const double l : losses_) total += l;
  loss_ = comm_.rank() == 0 ? total : 0.0;
  const auto t_end = std::chrono::steady_clock::now();
  if (record_) timeline_->add(Span{"tree gradient sum", "allreduce", 0, t_sum, t_end});
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
