#include "hpctrain/train/data_parallel.hpp"

#include <Kokkos_Core.hpp>
#include <xxhash.h>

#include <string>

#include "hpctrain/collectives/error.hpp"

namespace hpctrain::train {

namespace {

std::uint64_t model_fingerprint(const models::Sequential<float>& model) {
  std::string description;
  for (const auto& p : model.parameter_info()) {
    description += p.name + ":" + std::to_string(p.offset) + ":" + std::to_string(p.count) + ";";
  }
  return XXH3_64bits(description.data(), description.size());
}

}  // namespace

DataParallel::DataParallel(coll::Communicator& comm, models::Sequential<float>& model,
                           DataParallelOptions options, Timeline* timeline)
    : comm_(comm), model_(model), options_(options), timeline_(timeline) {
  HPCTRAIN_REQUIRE(options_.bucket_bytes > 0 && options_.first_bucket_bytes > 0,
                   "--bucket-mb must be positive");
  const auto& info = model_.parameter_info();
  // Reverse registration order; a bucket closes once it holds at least its byte target.
  std::size_t target = options_.first_bucket_bytes;
  GradientBucket current;
  bool open = false;
  for (auto it = info.rbegin(); it != info.rend(); ++it) {
    if (!open) {
      current = GradientBucket{it->offset + it->count, 0, it->layer};
      open = true;
    }
    current.offset = it->offset;
    current.count += it->count;
    current.ready_after_layer = it->layer;
    if (static_cast<std::size_t>(current.count) * sizeof(float) >= target) {
      buckets_.push_back(current);
      open = false;
      target = options_.bucket_bytes;
    }
  }
  if (open) buckets_.push_back(current);
}

void DataParallel::broadcast_parameters() {
  std::int64_t mine[2] = {model_.parameter_count(), static_cast<std::int64_t>(model_fingerprint(model_))};
  std::int64_t lo[2] = {mine[0], mine[1]}, hi[2] = {mine[0], mine[1]};
  comm_.allreduce(lo, 2, coll::ReduceOp::min);
  comm_.allreduce(hi, 2, coll::ReduceOp::max);
  HPCTRAIN_REQUIRE(lo[0] == hi[0] && lo[1] == hi[1],
                   "ranks built different models (this rank: " + std::to_string(mine[0]) +
                       " parameters; counts across ranks range " + std::to_string(lo[0]) + ".." +
                       std::to_string(hi[0]) + "): every rank must get the same --model and options");
  Kokkos::fence();
  const auto& params = model_.parameter_buffer();
  comm_.broadcast(params.data(), params.extent(0), coll::DataType::f32, 0);
}

void DataParallel::begin_step(bool sync) {
  sync_ = sync;
  next_bucket_ = 0;
  work_.clear();
  if (sync_) spans_.clear();
}

std::function<void(std::size_t)> DataParallel::backward_hook() {
  return [this](std::size_t layer) { launch_ready(layer); };
}

void DataParallel::launch_ready(std::size_t layer_done) {
  if (!sync_) return;
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].ready_after_layer >= layer_done) {
    launch(next_bucket_++);
  }
}

void DataParallel::launch(std::size_t bucket) {
  // The kernels that wrote these gradients must have finished before the communication
  // thread reads them (a no-op on host backends; required on GPUs).
  Kokkos::fence();
  const GradientBucket& b = buckets_[bucket];
  float* grads = model_.gradient_buffer().data() + b.offset;
  work_.push_back(comm_.iallreduce(grads, grads, static_cast<std::size_t>(b.count), coll::DataType::f32,
                                   coll::ReduceOp::sum, options_.algorithm));
}

double DataParallel::finish() {
  if (!sync_) return 0.0;
  while (next_bucket_ < buckets_.size()) launch(next_bucket_++);
  const auto start = std::chrono::steady_clock::now();
  for (auto& w : work_) w.wait();
  const auto end = std::chrono::steady_clock::now();
  for (std::size_t k = 0; k < work_.size(); ++k) {
    spans_.emplace_back(work_[k].started_at(), work_[k].finished_at());
    if (timeline_) {
      timeline_->add(Span{"allreduce bucket " + std::to_string(k) + " (" +
                              std::to_string(buckets_[k].count * 4 / 1024) + " KiB)",
                          "allreduce", 1, work_[k].started_at(), work_[k].finished_at()});
    }
  }
  return std::chrono::duration<double>(end - start).count();
}

}  // namespace hpctrain::train
