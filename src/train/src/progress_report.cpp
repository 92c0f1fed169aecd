#include "progress_report.hpp"

#include "hpctrain/core/gemm.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "hpctrain/base/error.hpp"
#include "hpctrain/core/conv.hpp"
#include "hpctrain/core/gemm.hpp"
#include "hpctrain/core/environment.hpp"
#include "hpctrain/train/deterministic_sync.hpp"
#include "hpctrain/train/output_checks.hpp"

namespace hpctrain::train {

namespace {

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const auto t = static_cast<long long>(s + 0.5);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", t / 3600, (t / 60) % 60, t % 60);
  return buf;
}

}  // namespace

ProgressReport::ProgressReport(const TrainOptions& options, coll::Communicator& comm, const LrSchedule& schedule,
                               std::int64_t total_steps)
    : options_(options), comm_(comm), schedule_(schedule), total_steps_(total_steps),
      chatty_(comm.rank() == 0 && !options.quiet) {
  if (comm.rank() == 0 && !options.metrics_path.empty()) {
    metrics_.open(options.metrics_path, options.append_metrics ? std::ios::app : std::ios::trunc);
    HPCTRAIN_REQUIRE(metrics_.good(), "--metrics: cannot write '" + options.metrics_path + "'");
  }
  if (comm.rank() == 0 && !options.tensorboard_dir.empty()) {
    tensorboard_ = std::make_unique<io::TfEventsWriter>(options.tensorboard_dir, "--tensorboard");
  }
}

void ProgressReport::print_start(const RunDescription& run) const {
  if (!chatty_) return;
  const TrainOptions& o = options_;
  std::printf("hpctrain: %s, %lld parameters, %d ranks, global batch %lld%s, %lld steps (%lld epochs x %lld)\n",
              o.model.value("name", std::string("model")).c_str(), static_cast<long long>(run.parameters),
              comm_.size(), static_cast<long long>(o.global_batch),
              o.accumulate > 1 ? (" x " + std::to_string(o.accumulate) + " accumulated").c_str() : "",
              static_cast<long long>(run.total_steps), static_cast<long long>(o.epochs),
              static_cast<long long>(run.steps_per_epoch));
  const std::string blocks =
      o.shuffle_block > 1 ? ", shuffled in blocks of " + std::to_string(o.shuffle_block) : std::string();
  std::printf("hpctrain: data '%s' (%lld samples%s%s), %zu gradient buckets, lr %.4g (%s schedule)\n", o.data.c_str(),
              static_cast<long long>(run.data_samples), run.data_in_memory ? ", in memory" : "", blocks.c_str(),
              run.gradient_buckets,
              schedule_.base_lr,
              to_string(schedule_.kind).c_str());
  std::printf("hpctrain: compute: %s, gemm on %s, convolutions on %s\n", describe(compute_threads()).c_str(),
              core::gemm_backend_name(core::gemm_backend()), core::conv_backend_name(core::conv_backend()));
  if (const std::string gpu = describe(device_choice()); !gpu.empty()) std::printf("hpctrain: device: %s\n", gpu.c_str());
  if (!device_choice().warning.empty()) std::fprintf(stderr, "hpctrain: warning: %s\n", device_choice().warning.c_str());
  if (o.deterministic) {
    const std::int64_t shards = micro_shard_count(o.global_batch, o.micro_shard);
    std::printf("hpctrain: deterministic mode: micro-shards of %lld samples (%lld per global batch), "
                "gradients summed in float over a fixed tree on the micro-shard index, BLAS threads per rank: %s, "
                "oneDNN: 1, thread-count-independent kernels: %d\n",
                static_cast<long long>(o.micro_shard),
                static_cast<long long>(shards),
                run.blas_threads < 0 ? "not OpenBLAS (set its thread count to 1 yourself)"
                                     : std::to_string(run.blas_threads).c_str(),
                run.kernel_threads);
    if (shards < comm_.size()) {
      std::printf("hpctrain: note: %lld micro-shards per global batch: %lld of the %d ranks hold none and only "
                  "wait (a smaller --micro-shard keeps every rank busy, with other bytes)\n",
                  static_cast<long long>(shards), static_cast<long long>(comm_.size() - shards), comm_.size());
    }
    if (run.library_bound_passes && run.kernel_threads > 1) {
      std::printf("hpctrain: note: deterministic mode runs micro-shards one at a time on oneDNN held at one thread "
                  "here (the attention's; every layer with HPCTRAIN_DETERMINISTIC_PASSES=micro-shard or a layer without "
                  "leaf rows), and %d threads per rank leave %d idle there; one rank per core (--threads-per-rank 1, "
                  "%d times the ranks) gives the same bytes faster (docs/deterministic.md)\n",
                  run.kernel_threads, run.kernel_threads - 1, run.kernel_threads);
    }
    // Two or more micro-shards per rank: the largest micro-shard that still gives every rank one
    // runs faster (fewer, larger passes; docs/deterministic.md gives the measured costs).
    // Not on one rank: a one-rank deterministic run is usually the reference others compare with.
    const std::int64_t ranks = comm_.size();
    const std::int64_t widest = (o.global_batch + ranks - 1) / ranks;
    if (ranks >= 2 && shards >= 2 * ranks && widest > o.micro_shard) {
      std::printf("hpctrain: note: %lld micro-shards per global batch over %lld ranks; --micro-shard %lld would "
                  "run faster with every rank still busy (other bytes; a resume at more than %lld ranks would then "
                  "leave some idle; docs/deterministic.md)\n",
                  static_cast<long long>(shards), static_cast<long long>(ranks), static_cast<long long>(widest),
                  static_cast<long long>(micro_shard_count(o.global_batch, widest)));
    }
  }
  std::fflush(stdout);
}

void ProgressReport::after_step(std::int64_t step, std::int64_t epoch, double loss_share, std::int64_t samples,
                                Clock::time_point step_end, const TimeTotals& times) {
  ++window_steps_;
  window_loss_ += loss_share;
  window_samples_ += samples;
  const bool last = step == total_steps_;
  if (!((options_.log_every > 0 && step % options_.log_every == 0) || last)) return;
  double loss = window_loss_;
  comm_.allreduce(&loss, 1, coll::ReduceOp::sum);
  loss /= static_cast<double>(window_steps_);
  const double elapsed = seconds(window_start_, step_end);
  const double rate = static_cast<double>(window_samples_) / std::max(elapsed, 1e-9);
  const double eta = static_cast<double>(total_steps_ - step) * elapsed / static_cast<double>(window_steps_);
  if (chatty_) {
    std::printf("epoch %lld/%lld  step %lld/%lld  loss %.4f  lr %.4g  %.0f samples/s  ETA %s\n",
                static_cast<long long>(epoch + 1), static_cast<long long>(options_.epochs),
                static_cast<long long>(step), static_cast<long long>(total_steps_), loss, schedule_.at(step - 1), rate,
                format_duration(eta).c_str());
    std::fflush(stdout);
  }
  if (metrics_.is_open()) {
    metrics_ << nlohmann::json{{"type", "train"},         {"step", step},
                               {"epoch", epoch},          {"loss", loss},
                               {"lr", schedule_.at(step - 1)}, {"samples_per_s", rate},
                               {"compute_s", times.compute_s}, {"comm_exposed_s", times.comm_exposed_s},
                               {"data_wait_s", times.data_wait_s}}
                    .dump()
             << "\n";
    metrics_.flush();
    require_written(metrics_, "--metrics", options_.metrics_path);
  }
  if (tensorboard_) {
    tensorboard_->add_scalar("train/loss", step, loss);
    tensorboard_->add_scalar("train/lr", step, schedule_.at(step - 1));
    tensorboard_->add_scalar("train/samples_per_s", step, rate);
    tensorboard_->add_scalar("time/compute_s", step, times.compute_s);
    tensorboard_->add_scalar("time/exposed_comm_s", step, times.comm_exposed_s);
  }
  last_loss_ = loss;
  window_loss_ = 0;
  window_steps_ = 0;
  window_samples_ = 0;
  window_start_ = Clock::now();
}

void ProgressReport::after_eval(std::int64_t step, std::int64_t epoch, const EvalResult& eval) {
  if (chatty_) {
    std::printf("epoch %lld/%lld  test loss %.4f  test accuracy %.2f%% (%lld samples)\n",
                static_cast<long long>(epoch + 1), static_cast<long long>(options_.epochs), eval.loss,
                100.0 * eval.accuracy, static_cast<long long>(eval.samples));
    std::fflush(stdout);
  }
  if (metrics_.is_open()) {
    metrics_ << nlohmann::json{{"type", "eval"}, {"step", step}, {"epoch", epoch}, {"loss", eval.loss},
                               {"accuracy", eval.accuracy}}
                    .dump()
             << "\n";
    metrics_.flush();
    require_written(metrics_, "--metrics", options_.metrics_path);
  }
  if (tensorboard_) {
    tensorboard_->add_scalar("eval/loss", step, eval.loss);
    tensorboard_->add_scalar("eval/accuracy", step, eval.accuracy);
  }
}

void ProgressReport::after_skipped_step(std::int64_t step, std::int64_t epoch, const std::string& cause,
                                        std::int64_t skipped) {
  if (comm_.rank() != 0) return;
  // A warning, printed even with --quiet: the run goes on without this step's update.
  std::fprintf(stderr, "hpctrain: warning: %s; step skipped (%lld of at most %lld: --skip-nonfinite-steps)\n",
               cause.c_str(), static_cast<long long>(skipped), static_cast<long long>(options_.skip_nonfinite_steps));
  std::fflush(stderr);
  if (metrics_.is_open()) {
    metrics_ << nlohmann::json{{"type", "skipped_step"}, {"step", step},       {"epoch", epoch},
                               {"cause", cause},         {"skipped", skipped}}
                    .dump()
             << "\n";
    metrics_.flush();
    require_written(metrics_, "--metrics", options_.metrics_path);
  }
  if (tensorboard_) tensorboard_->add_scalar("train/skipped_steps", step, static_cast<double>(skipped));
}

void ProgressReport::print_summary(const TrainResult& r) {
  if (metrics_.is_open()) {
    metrics_ << nlohmann::json{{"type", "summary"}, {"ranks", comm_.size()}, {"global_batch", options_.global_batch},
                               {"steps", r.steps}, {"seconds", r.seconds}, {"samples_per_s", r.samples_per_s},
                               {"compute_s", r.compute_s}, {"comm_exposed_s", r.comm_exposed_s},
                               {"data_wait_s", r.data_wait_s}, {"parameter_checksum", r.parameter_checksum},
                               {"preempted", r.preempted}, {"eval_accuracy", r.eval.accuracy},
                               {"skipped_steps", r.skipped_steps},
                               {"strategy", options_.strategy}, {"grad_dtype", options_.grad_dtype},
                               {"grad_error_feedback", options_.grad_error_feedback},
                               {"optimizer_state_bytes", r.memory.optimizer_state_bytes},
                               {"gradient_bytes", r.memory.gradient_bytes},
                               {"parameter_bytes", r.memory.parameter_bytes},
                               {"peak_rss_bytes", r.memory.peak_rss_bytes}}
                    .dump()
             << "\n";
  }
  if (!chatty_) return;
  std::printf("hpctrain: done: %lld steps in %.1f s, %.0f samples/s after %lld warm-up steps "
              "(rank 0: compute %.1f s, exposed communication %.1f s, data wait %.1f s)\n",
              static_cast<long long>(r.steps), r.seconds, r.samples_per_s,
              static_cast<long long>(options_.warmup_steps_for_throughput), r.compute_s, r.comm_exposed_s,
              r.data_wait_s);
  if (r.skipped_steps > 0) {
    std::printf("hpctrain: skipped %lld non-finite step(s) (--skip-nonfinite-steps %lld)\n",
                static_cast<long long>(r.skipped_steps), static_cast<long long>(options_.skip_nonfinite_steps));
  }
  std::printf("hpctrain: final parameter checksum xxh3:%016llx (%lld parameters)\n",
              static_cast<unsigned long long>(r.parameter_checksum), static_cast<long long>(r.parameter_count));
  std::fflush(stdout);
}

void ThroughputMeter::after_step(std::int64_t step, std::int64_t samples, Clock::time_point step_end) {
  if (step - first_step_ == warmup_steps_) start_ = step_end;
  if (step - first_step_ > warmup_steps_) samples_ += samples;
}

void ThroughputMeter::exclude(std::int64_t step, double s) {
  if (step - first_step_ >= warmup_steps_) excluded_s_ += s;
}

double ThroughputMeter::samples_per_s(coll::Communicator& comm, Clock::time_point end) const {
  double elapsed = samples_ > 0 ? seconds(start_, end) - excluded_s_ : 0.0;
  comm.allreduce(&elapsed, 1, coll::ReduceOp::max);  // the slowest rank sets the pace
  return elapsed > 0 ? static_cast<double>(samples_) / elapsed : 0.0;
}

}  // namespace hpctrain::train
