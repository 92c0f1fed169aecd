#include "checkpoint_policy.hpp"

#include <Kokkos_Core.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <utility>
#include <vector>

#include "hpctrain/base/error.hpp"
#include "hpctrain/collectives/agreement.hpp"
#include "hpctrain/core/tensor.hpp"
#include "hpctrain/io/checkpoint.hpp"
#include "hpctrain/train/finite_guard.hpp"
#include "hpctrain/train/preemption.hpp"

namespace hpctrain::train {

namespace {

using coll::agree_with_rank0;
using coll::broadcast_string;

/// What must match between a checkpoint and the run that resumes from it, so the sample
/// sequence and the model are the same.
nlohmann::json run_identity(const TrainOptions& o, std::int64_t samples) {
  nlohmann::json id = {{"model", o.model},       {"global_batch", o.global_batch}, {"accumulate", o.accumulate},
                       {"seed", o.seed},         {"drop_last", o.drop_last},       {"optimizer", o.optimizer},
                       {"data_samples", samples}};
  // Only deterministic runs add these, so checkpoints of ordinary runs keep resuming as before;
  // a deterministic run resumes only a deterministic checkpoint with the same micro-shards.
  if (o.deterministic) {
    id["deterministic"] = true;
    id["micro_shard"] = o.micro_shard;
  }
  if (o.shuffle_block != 1) id["shuffle_block"] = o.shuffle_block;  // likewise: only when set
  return id;
}

struct HostState {
  std::vector<float> params;
  /// (state name, values): the whole buffer, or with a shard this rank's shard of it.
  std::vector<std::pair<std::string, std::vector<float>>> optimizer;
};

std::vector<io::CheckpointTensor> parameter_tensors(const models::Sequential<float>& model, const HostState& h) {
  std::vector<io::CheckpointTensor> out;
  for (const auto& p : model.parameter_info()) out.push_back({"params/" + p.name, p.shape, h.params.data() + p.offset});
  return out;
}

std::string state_name(const std::string& state, const models::ParameterInfo& p) {
  return "optimizer/" + state + "/" + p.name;
}

/// Replicated optimiser state: whole tensors, split evenly by the writer like the parameters.
std::vector<io::CheckpointTensor> state_tensors(const models::Sequential<float>& model, const HostState& h) {
  std::vector<io::CheckpointTensor> out;
  for (const auto& [state, values] : h.optimizer) {
    for (const auto& p : model.parameter_info()) out.push_back({state_name(state, p), p.shape, values.data() + p.offset});
  }
  return out;
}

/// Sharded optimiser state: this rank's slice of every tensor, written as it is held.
std::vector<io::CheckpointSlice> state_slices(const models::Sequential<float>& model, const HostState& h,
                                              const ShardLayout& shard) {
  std::vector<io::CheckpointSlice> out;
  for (const auto& [state, values] : h.optimizer) {
    for (const auto& p : model.parameter_info()) {
      const ShardRange r = shard.slice_of(p.offset, p.count);
      out.push_back({state_name(state, p), p.shape, r.global_offset - p.offset, r.count, values.data() + r.local_offset});
    }
  }
  return out;
}

std::int64_t state_count(const models::Sequential<float>& model, const ShardLayout* shard) {
  return shard ? shard->shard_count() : model.parameter_count();
}

void save_checkpoint(coll::Communicator& comm, const TrainOptions& o, models::Sequential<float>& model,
                     core::Optimizer<float>& optimizer, const ShardLayout* shard, std::int64_t step,
                     std::int64_t epoch, std::int64_t next_batch, std::int64_t samples, const char* reason) {
  const bool chatty = comm.rank() == 0 && !o.quiet;
  Kokkos::fence();
  if (optimizer.state().empty()) optimizer.allocate_state(state_count(model, shard));
  HostState h;
  h.params = core::to_host(model.parameter_buffer());
  require_finite_parameters(h.params.data(), h.params.size(), step);
  for (const auto& s : optimizer.state()) h.optimizer.emplace_back(s.name, core::to_host(s.tensor.data));
  nlohmann::json meta = run_identity(o, samples);
  meta["step"] = step;
  meta["epoch"] = epoch;
  meta["next_batch"] = next_batch;
  meta["optimizer_step_count"] = optimizer.step_count();
  meta["parameter_checksum"] = parameter_checksum(h.params.data(), h.params.size());
  meta["reason"] = reason;
  // What predict/serve must apply to an input before the model sees it (docs/serving.md);
  // checkpoints written before this field read as the trainer's defaults.
  meta["input_normalization"] = {{"mean", o.normalize_mean}, {"std", o.normalize_std}};
  meta["strategy"] = o.strategy;  // informational: any strategy resumes any checkpoint
  std::vector<io::CheckpointTensor> tensors = parameter_tensors(model, h);
  std::vector<io::CheckpointSlice> slices;
  if (shard) {
    slices = state_slices(model, h, *shard);
  } else {
    for (auto& t : state_tensors(model, h)) tensors.push_back(std::move(t));
  }
  const auto r = io::write_checkpoint(comm, o.checkpoint_dir, step, meta, tensors, slices, o.keep);
  if (chatty) {
    std::printf("hpctrain: checkpoint %s (%s): %.1f MB in %.2f s (%.0f MB/s)\n", r.path.c_str(), reason,
                static_cast<double>(r.bytes) / 1e6, r.seconds, static_cast<double>(r.bytes) / 1e6 / std::max(r.seconds, 1e-9));
    std::fflush(stdout);
  }
}

/// Rank 0: the checkpoint --resume names (or "" to start fresh), after checking it is valid and
/// was written by a run with this run's identity. Throws on a problem.
std::string choose_checkpoint(const TrainOptions& o, std::int64_t samples, bool chatty) {
  std::string chosen;
  if (o.resume == "auto") {
    HPCTRAIN_REQUIRE(!o.checkpoint_dir.empty(), "--resume auto needs --checkpoint-dir");
    std::vector<io::CheckpointProblem> skipped;
    chosen = io::find_latest_checkpoint(o.checkpoint_dir, &skipped);
    for (const auto& p : skipped) std::fprintf(stderr, "hpctrain: skipping checkpoint: %s: %s\n", p.path.c_str(), p.what.c_str());
    if (chosen.empty() && chatty) std::printf("hpctrain: no valid checkpoint in '%s': starting fresh\n", o.checkpoint_dir.c_str());
  } else {
    const auto problems = io::verify_checkpoint(o.resume);
    std::string all;
    for (const auto& p : problems) all += (all.empty() ? "" : "; ") + p.path + ": " + p.what;
    HPCTRAIN_REQUIRE(problems.empty(), "--resume '" + o.resume + "' is not a valid checkpoint: " + all);
    chosen = o.resume;
  }
  if (!chosen.empty()) {
    const std::string unprotected = io::manifest_warning(io::read_manifest(chosen));
    if (!unprotected.empty()) std::fprintf(stderr, "hpctrain: warning: %s: %s\n", chosen.c_str(), unprotected.c_str());
    const nlohmann::json meta = io::read_manifest(chosen).at("metadata");
    const nlohmann::json want = run_identity(o, samples);
    for (const auto& [key, value] : want.items()) {
      HPCTRAIN_REQUIRE(meta.contains(key) && meta.at(key) == value,
                       "checkpoint '" + chosen + "' was written with " + key + " = " +
                           (meta.contains(key) ? meta.at(key).dump() : std::string("(absent)")) +
                           ", this run has " + value.dump() + ": resume needs the same value");
    }
  }
  return chosen;
}

/// Every rank: reads the step directory `path` into `model` and `optimizer` (with `shard`,
/// only this rank's part of the optimiser state; the whole tensors are read on the host, then
/// the shard kept).
ResumePoint load_checkpoint(const std::string& path, models::Sequential<float>& model,
                            core::Optimizer<float>& optimizer, const ShardLayout* shard) {
  ResumePoint point;
  point.path = path;
  const nlohmann::json meta = io::read_manifest(point.path).at("metadata");
  optimizer.allocate_state(state_count(model, shard));
  HostState h;
  h.params.resize(static_cast<std::size_t>(model.parameter_count()));
  const auto state = optimizer.state();
  for (const auto& s : state) h.optimizer.emplace_back(s.name, std::vector<float>(h.params.size()));
  std::vector<io::CheckpointDestination> dests;
  for (const auto& t : parameter_tensors(model, h)) dests.push_back({t.name, t.shape, const_cast<float*>(t.data)});
  for (const auto& t : state_tensors(model, h)) dests.push_back({t.name, t.shape, const_cast<float*>(t.data)});
  io::read_checkpoint_tensors(point.path, dests);
  // End to end: the parameters as reassembled on this rank (from any number of shards) must
  // hash to what the writer hashed before splitting them.
  if (meta.contains("parameter_checksum")) {
    HPCTRAIN_REQUIRE(meta.at("parameter_checksum").get<std::uint64_t>() == parameter_checksum(h.params.data(), h.params.size()),
                     "checkpoint '" + point.path + "': the parameters read back do not match the checksum recorded "
                     "when they were written");
  }
  core::from_host(model.parameter_buffer(), h.params);
  for (std::size_t i = 0; i < state.size(); ++i) {
    if (!shard) {
      core::from_host(state[i].tensor.data, h.optimizer[i].second);
      continue;
    }
    std::vector<float> mine(static_cast<std::size_t>(shard->shard_count()));
    for (const ShardRange& r : shard->ranges()) {
      std::copy_n(h.optimizer[i].second.begin() + r.global_offset, r.count, mine.begin() + r.local_offset);
    }
    core::from_host(state[i].tensor.data, mine);
  }
  optimizer.set_step_count(meta.at("optimizer_step_count").get<std::int64_t>());
  point.step = meta.at("step").get<std::int64_t>();
  point.epoch = meta.at("epoch").get<std::int64_t>();
  point.next_batch = meta.at("next_batch").get<std::int64_t>();
  Kokkos::fence();
  return point;
}

}  // namespace

ResumePoint resume_from_checkpoint(coll::Communicator& comm, const TrainOptions& o, models::Sequential<float>& model,
                                   core::Optimizer<float>& optimizer, std::int64_t samples,
                                   const ShardLayout* shard) {
  const bool chatty = comm.rank() == 0 && !o.quiet;
  std::string chosen;
  std::exception_ptr error;
  if (comm.rank() == 0) {
    try {
      chosen = choose_checkpoint(o, samples, chatty);
    } catch (...) {
      error = std::current_exception();
    }
  }
  agree_with_rank0(comm, error);
  const std::string path = broadcast_string(comm, chosen);
  if (path.empty()) return ResumePoint{};
  const ResumePoint point = load_checkpoint(path, model, optimizer, shard);
  if (chatty) {
    std::printf("hpctrain: resumed from %s (step %lld, epoch %lld, batch %lld; written by %lld ranks)\n",
                point.path.c_str(), static_cast<long long>(point.step), static_cast<long long>(point.epoch + 1),
                static_cast<long long>(point.next_batch),
                static_cast<long long>(io::read_manifest(point.path).at("world_size").get<std::int64_t>()));
    std::fflush(stdout);
  }
  return point;
}

CheckpointPolicy::CheckpointPolicy(const TrainOptions& o, coll::Communicator& comm, std::int64_t data_samples,
                                   const ShardLayout* shard)
    : options_(o), comm_(comm), data_samples_(data_samples), shard_(shard), enabled_(!o.checkpoint_dir.empty()) {
  HPCTRAIN_REQUIRE(o.checkpoint_every >= 0 && o.checkpoint_every_s >= 0, "--checkpoint-every must be non-negative");
  HPCTRAIN_REQUIRE(!enabled_ || o.keep >= 1, "--keep must be at least 1");
  if (enabled_) install_preemption_handlers();
}

bool CheckpointPolicy::after_step(std::int64_t step, std::int64_t total_steps, std::int64_t epoch,
                                  std::int64_t next_batch, models::Sequential<float>& model,
                                  core::Optimizer<float>& optimizer) {
  if (!enabled_) return false;
  const TrainOptions& o = options_;
  using Clock = std::chrono::steady_clock;
  // All ranks agree at the step boundary: a signal on any rank, or rank 0's clock.
  int flags[2] = {preemption_requested() ? 1 : 0,
                  comm_.rank() == 0 && o.checkpoint_every_s > 0 &&
                          std::chrono::duration<double>(Clock::now() - last_checkpoint_).count() >= o.checkpoint_every_s
                      ? 1
                      : 0};
  comm_.allreduce(flags, 2, coll::ReduceOp::max);
  const bool preempted = flags[0] != 0;
  const bool periodic = (o.checkpoint_every > 0 && step % o.checkpoint_every == 0) || flags[1];
  if (preempted || periodic || step == total_steps) {
    save_checkpoint(comm_, o, model, optimizer, shard_, step, epoch, next_batch, data_samples_,
                    preempted ? "preemption" : (step == total_steps ? "final" : "periodic"));
    ++written_;
    last_checkpoint_ = Clock::now();
  }
  if (preempted && comm_.rank() == 0 && !o.quiet) {
    std::printf("hpctrain: preemption signal received: checkpointed at step %lld, exiting with %d (requeue)\n",
                static_cast<long long>(step), kExitRequeue);
  }
  return preempted;
}

}  // namespace hpctrain::train
