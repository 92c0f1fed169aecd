#include "hpctrain/train/data_parallel.hpp"

#include <Kokkos_Core.hpp>
#include <xxhash.h>

#include <string>

#include "hpctrain/base/error.hpp"
#include "wire_cast.hpp"

namespace hpctrain::train {

namespace {

/// False in a build whose Kokkos keeps tensors in GPU memory (CUDA): the buffers must not be
/// dereferenced on the host nor handed to the collectives' host overloads.
constexpr bool kHostBuffers = Kokkos::SpaceAccessibility<Kokkos::HostSpace, core::MemSpace>::accessible;

std::uint64_t tensor_fingerprint(const std::vector<models::ParameterInfo>& tensors) {
  std::string description;
  for (const auto& p : tensors) {
    description += p.name + ":" + std::to_string(p.offset) + ":" + std::to_string(p.count) + ";";
  }
  return XXH3_64bits(description.data(), description.size());
}

}  // namespace

ParameterBuffers ParameterBuffers::of(const models::Sequential<float>& model) {
  return ParameterBuffers{model.parameter_buffer(), model.gradient_buffer(), model.parameter_info()};
}

void broadcast_parameters(coll::Communicator& comm, const ParameterBuffers& buffers) {
  std::int64_t mine[2] = {buffers.count(), static_cast<std::int64_t>(tensor_fingerprint(buffers.tensors))};
  std::int64_t lo[2] = {mine[0], mine[1]}, hi[2] = {mine[0], mine[1]};
  comm.allreduce(lo, 2, coll::ReduceOp::min);
  comm.allreduce(hi, 2, coll::ReduceOp::max);
  HPCTRAIN_REQUIRE(lo[0] == hi[0] && lo[1] == hi[1],
                   "ranks built different models (this rank: " + std::to_string(mine[0]) +
                       " parameters; counts across ranks range " + std::to_string(lo[0]) + ".." +
                       std::to_string(hi[0]) + "): every rank must get the same --model and options");
  Kokkos::fence();
  if constexpr (kHostBuffers) {
    comm.broadcast(buffers.parameters.data(), buffers.parameters.extent(0), coll::DataType::f32, 0);
  } else {  // device parameters: through a host copy (the broadcast is host memory only)
    std::vector<float> host = core::to_host(buffers.parameters);
    comm.broadcast(host.data(), host.size(), coll::DataType::f32, 0);
    core::from_host(buffers.parameters, host);
  }
}

std::vector<GradientBucket> plan_gradient_buckets(const std::vector<models::ParameterInfo>& tensors,
                                                  const DataParallelOptions& options) {
  HPCTRAIN_REQUIRE(options.bucket_bytes > 0 && options.first_bucket_bytes > 0, "--bucket-mb must be positive");
  std::vector<GradientBucket> buckets;
  // Reverse registration order; a bucket closes once it holds at least its byte target.
  std::size_t target = options.first_bucket_bytes;
  GradientBucket current;
  bool open = false;
  for (auto it = tensors.rbegin(); it != tensors.rend(); ++it) {
    if (!open) {
      current = GradientBucket{it->offset + it->count, 0, it->layer};
      open = true;
    }
    current.offset = it->offset;
    current.count += it->count;
    current.ready_after_layer = it->layer;
    if (static_cast<std::size_t>(current.count) * sizeof(float) >= target) {
      buckets.push_back(current);
      open = false;
      target = options.bucket_bytes;
    }
  }
  if (open) buckets.push_back(current);
  return buckets;
}

DataParallel::DataParallel(coll::Communicator& comm, ParameterBuffers buffers, DataParallelOptions options,
                           Timeline* timeline)
    : comm_(comm),
      buffers_(std::move(buffers)),
      options_(options),
      timeline_(timeline),
      buckets_(plan_gradient_buckets(buffers_.tensors, options_)) {
  HPCTRAIN_REQUIRE(!options_.error_feedback || options_.wire_type != coll::DataType::f32,
                   "--grad-error-feedback needs --grad-dtype bf16 or f16: f32 gradients are sent unrounded");
}

std::uint64_t DataParallel::residual_bytes() const noexcept {
  std::uint64_t bytes = 0;
  if (options_.error_feedback) {
    for (const GradientBucket& b : buckets_) bytes += static_cast<std::uint64_t>(b.count) * sizeof(float);
  }
  return bytes;
}

void DataParallel::broadcast_parameters() { train::broadcast_parameters(comm_, buffers_); }

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
  const coll::DataType type = options_.wire_type;
  // One rank: a sum of one term is that term, so an f32 all-reduce or reduce-scatter in place
  // has nothing to do. Not handing it to the progress thread saves two wake-ups of that thread
  // per MLP step (each takes a core from a rank whose threads fill the node: 1 rank x 2
  // threads). A narrower wire type still goes through its pack and unpack (their rounding is
  // part of the result at any rank count).
  if (comm_.size() == 1 && type == coll::DataType::f32) return;
  // The kernels that wrote these gradients must have finished before the communication
  // thread reads them (a no-op on host backends; required on GPUs).
  Kokkos::fence();
  const GradientBucket& b = buckets_[bucket];
  const auto n = static_cast<std::size_t>(b.count);
  void* data = buffers_.gradients.data() + b.offset;
  if constexpr (!kHostBuffers) {
    // Device gradients: the all-reduce's device overload (staged through a DeviceMemory, or
    // NCCL); the wire casts and reduce-scatter read them on the host, so not yet on a device.
    HPCTRAIN_REQUIRE(type == coll::DataType::f32 && options_.reduction == BucketReduction::allreduce,
                     "gradients in GPU memory: only the f32 all-reduce of the buckets runs on device buffers "
                     "(no --grad-dtype other than f32, not --strategy zero1/zero2 yet; docs/compute-core.md)");
    work_.push_back(comm_.iallreduce(data, data, n, type, coll::ReduceOp::sum, coll::MemorySpace::device,
                                     options_.algorithm));
    return;
  }
  if (type != coll::DataType::f32) {
    if (wire_.size() <= bucket) wire_.resize(buckets_.size());
    wire_[bucket].resize(n);
    if (options_.error_feedback) {
      if (residual_.size() <= bucket) residual_.resize(buckets_.size());
      residual_[bucket].resize(n, 0.0f);  // zero before the first cast
      pack_wire_with_feedback(static_cast<float*>(data), residual_[bucket].data(), wire_[bucket].data(), n, type,
                              options_.wire_cast);
    } else {
      pack_wire(static_cast<const float*>(data), wire_[bucket].data(), n, type, options_.wire_cast);
    }
    data = wire_[bucket].data();
  }
  if (options_.reduction == BucketReduction::reduce_scatter) {
    work_.push_back(comm_.ireduce_scatter_in_place(data, n, type, coll::ReduceOp::sum, options_.algorithm));
  } else {
    work_.push_back(comm_.iallreduce(data, data, n, type, coll::ReduceOp::sum, options_.algorithm));
  }
}

void DataParallel::unpack(std::size_t bucket) {
  if (options_.wire_type == coll::DataType::f32) return;
  const GradientBucket& b = buckets_[bucket];
  coll::BlockRange part{0, static_cast<std::size_t>(b.count)};
  if (options_.reduction == BucketReduction::reduce_scatter) {
    part = coll::balanced_block(part.count, comm_.size(), comm_.rank());
  }
  unpack_wire(wire_[bucket].data() + part.offset, buffers_.gradients.data() + b.offset + part.offset, part.count,
              options_.wire_type);
}

double DataParallel::finish() {
  if (!sync_) return 0.0;
  while (next_bucket_ < buckets_.size()) launch(next_bucket_++);
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t k = 0; k < work_.size(); ++k) {
    work_[k].wait();
    unpack(k);
  }
  const auto end = std::chrono::steady_clock::now();
  for (std::size_t k = 0; k < work_.size(); ++k) {
    spans_.emplace_back(work_[k].started_at(), work_[k].finished_at());
    if (timeline_) {
      const char* what = options_.reduction == BucketReduction::allreduce ? "allreduce" : "reduce_scatter";
      timeline_->add(Span{std::string(what) + " bucket " + std::to_string(k) + " (" +
                              std::to_string(buckets_[k].count * 4 / 1024) + " KiB)",
                          what, 1, work_[k].started_at(), work_[k].finished_at()});
    }
  }
  return std::chrono::duration<double>(end - start).count();
}

}  // namespace hpctrain::train
