#include "hpctrain/train/exact_sum_sync.hpp"

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <chrono>
#include <optional>

#include "apply_gradient.hpp"
#include "hpctrain/train/finite_guard.hpp"
#include "training_pass.hpp"
#include "hpctrain/collectives/reproducible_sum.hpp"

namespace hpctrain::train {

namespace {
using HostFloats = Kokkos::View<float*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
using ConstHostFloats = Kokkos::View<const float*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
}  // namespace

std::int64_t micro_shard_count(std::int64_t batch_size, std::int64_t micro_shard) {
  return (batch_size + micro_shard - 1) / micro_shard;
}

/// Each micro-shard's gradient is a term of an exact fixed-point sum (one scale per parameter
/// tensor); finish() sums the step's terms exactly over the ranks and writes the result back.
/// Where the gradient buffer is host memory, a term stays in it until the next micro-shard
/// needs the buffer and is then copied out and scanned in one pass (observe_copy); the step's
/// last term is never copied: finish() scans and adds it in place, and writes the sum over it.
/// With device gradients every term is copied to the host first.
class ExactSumSync::Terms {
 public:
  explicit Terms(const models::Sequential<float>& model) : count_(static_cast<std::size_t>(model.parameter_count())) {
    auto info = model.parameter_info();
    std::sort(info.begin(), info.end(), [](const auto& a, const auto& b) { return a.offset < b.offset; });
    for (const auto& p : info) {
      const auto end = static_cast<std::size_t>(p.offset + p.count);
      if (p.count > 0 && (block_ends_.empty() || end > block_ends_.back())) block_ends_.push_back(end);
    }
    if (block_ends_.empty() || block_ends_.back() != count_) block_ends_.push_back(count_);
  }

  /// Starts a step whose gradient is the sum of `total_terms` micro-shards over all ranks.
  void begin_step(std::int64_t total_terms) {
    if (!sum_ || total_terms != total_terms_) {
      sum_.emplace(count_, block_ends_, total_terms);
      total_terms_ = total_terms;
    } else {
      sum_->reset();
    }
    stored_ = 0;
    pending_ = false;
  }
  /// After one micro-shard's backward (the gradient buffer holds only its gradient).
  void collect(const core::Vec<float>& grads) {
    if constexpr (kHostGradients) {
      pending_ = true;
    } else {
      float* slot = next_slot();
      Kokkos::deep_copy(HostFloats(slot, count_), grads);
      sum_->observe(slot);
      ++stored_;
    }
  }
  /// Before the gradient buffer is zeroed for the next micro-shard: keeps the term it holds.
  void keep(const core::Vec<float>& grads) {
    if (!pending_) return;
    float* slot = next_slot();
    sum_->observe_copy(grads.data(), slot);
    ++stored_;
    pending_ = false;
  }
  /// Collective: the exact sum over all ranks' micro-shards, written into `grads`.
  void finish(coll::Communicator& comm, const core::Vec<float>& grads, coll::Algorithm algo) {
    local_.clear();
    for (std::size_t t = 0; t < stored_; ++t) local_.push_back(store_.data() + t * count_);
    if (pending_) {
      sum_->observe(grads.data());
      local_.push_back(grads.data());
    }
    sum_->agree_scales(comm);
    sum_->add_terms(local_.data(), local_.size());
    pending_ = false;
    if constexpr (kHostGradients) {
      sum_->finish(comm, grads.data(), algo);  // over the last term: already added
    } else {
      result_.resize(count_);
      sum_->finish(comm, result_.data(), algo);
      Kokkos::deep_copy(grads, ConstHostFloats(result_.data(), count_));
    }
  }

 private:
  static constexpr bool kHostGradients = Kokkos::SpaceAccessibility<Kokkos::HostSpace, core::MemSpace>::accessible;

  float* next_slot() {
    if (store_.size() < (stored_ + 1) * count_) store_.resize((stored_ + 1) * count_);
    return store_.data() + stored_ * count_;
  }

  std::size_t count_;
  std::vector<std::size_t> block_ends_;
  std::optional<coll::ReproducibleSum<float>> sum_;
  std::int64_t total_terms_ = 0;
  std::size_t stored_ = 0;  ///< terms copied into store_
  bool pending_ = false;    ///< a further term still in the gradient buffer
  std::vector<float> store_, result_;
  std::vector<const float*> local_;
};

struct ExactSumSync::Pass : TrainingPass {};

ExactSumSync::ExactSumSync(coll::Communicator& comm, models::Sequential<float>& model, std::int64_t micro_shard,
                           coll::Algorithm algorithm, Timeline* timeline)
    : comm_(comm), model_(model), trainable_(optimiser_mask(model)), micro_shard_(micro_shard), algorithm_(algorithm), timeline_(timeline),
      terms_(std::make_unique<Terms>(model)), pass_(std::make_unique<Pass>()) {}

ExactSumSync::~ExactSumSync() = default;

void ExactSumSync::begin_step(const OptimizerStep& step) {
  model_.zero_gradients();
  step_ = step;
  micro_ = 0;
  term_base_ = 0;
  std::int64_t terms = 0;
  for (const std::int64_t size : step.batch_sizes) terms += micro_shard_count(size, micro_shard_);
  terms_->begin_step(terms);
  losses_.assign(static_cast<std::size_t>(terms), 0.0);
}

void ExactSumSync::accumulate(const MicroBatch& micro) {
  const auto t_start = std::chrono::steady_clock::now();
  const auto shard = static_cast<std::size_t>(micro_shard_);
  const std::size_t count = micro.batch.count;
  for (std::size_t first = 0; first < count; first += shard) {
    const std::size_t rows = std::min(shard, count - first);
    pass_->input.load_rows(micro.batch, first, rows, model_.input_shape());
    terms_->keep(model_.gradient_buffer());
    model_.zero_gradients();
    const auto position = static_cast<std::int64_t>(first);
    const auto term = static_cast<std::size_t>(term_base_ + (micro.offset_in_batch + position) / micro_shard_);
    losses_[term] = pass_->forward_loss(model_, step_.index, micro.sample_position + position, step_.samples());
    model_.backward(pass_->dlogits, false);
    terms_->collect(model_.gradient_buffer());
  }
  term_base_ += micro_shard_count(step_.batch_sizes.at(micro_++), micro_shard_);
  Kokkos::fence();
  record_ = micro.record && timeline_;
  if (record_) {
    timeline_->add(Span{"micro-shards forward/backward", "compute", 0, t_start, std::chrono::steady_clock::now()});
  }
}

double ExactSumSync::finish_step() {
  const auto t_sum = std::chrono::steady_clock::now();
  terms_->finish(comm_, model_.gradient_buffer(), algorithm_);
  // One slot per micro-shard, exact all-reduce (one non-zero term per slot), summed in
  // micro-shard order; rank 0 holds the whole loss, so the ranks' shares sum to it.
  comm_.allreduce(losses_.data(), losses_.size(), coll::ReduceOp::sum);
  double total = 0.0;
  for (const double l : losses_) total += l;
  loss_ = comm_.rank() == 0 ? total : 0.0;
  const auto t_end = std::chrono::steady_clock::now();
  if (record_) timeline_->add(Span{"exact gradient sum", "allreduce", 0, t_sum, t_end});
  return std::chrono::duration<double>(t_end - t_sum).count();
}

double ExactSumSync::apply(core::Optimizer<float>& optimizer, double lr, double clip_norm) {
  apply_full_gradient(model_, optimizer, lr, clip_norm, trainable_);
  return 0.0;
}

GradientSync::HeldBytes ExactSumSync::held_bytes() const {
  const auto bytes = static_cast<std::uint64_t>(model_.parameter_count()) * sizeof(float);
  return HeldBytes{bytes, bytes + trainable_.extent(0) * sizeof(float)};  // the mask: models with state
}

std::int64_t ExactSumSync::count_nonfinite_gradient() const {
  return count_nonfinite_in_my_block(model_.gradient_buffer(), comm_.rank(), comm_.size());
}

}  // namespace hpctrain::train
