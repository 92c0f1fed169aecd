#pragma once
/// @file
/// ModelServer: rank 0's side of `hpctrain serve` without the HTTP: the request queue, one
/// thread per rank that takes batches from it and runs them on that rank, and the checkpoint
/// reload.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "hpctrain/serve/rank_workers.hpp"
#include "hpctrain/serve/request_batcher.hpp"
#include "hpctrain/serve/serve_metrics.hpp"
#include "hpctrain/serve/serve_options.hpp"

namespace hpctrain::serve {

/// Each runner (rank 0's own model and one per other rank) has a thread that repeatedly takes
/// the next batch from the batcher (RequestBatcher's rule), runs it there and fulfils its
/// requests, so P ranks run P batches at once. A newer checkpoint offered by offer() is loaded
/// by every runner before its next batch; the others keep serving meanwhile, so no request is
/// dropped (each answer names the step that computed it). With `reload_every_s` > 0 and a
/// checkpoint directory, a thread looks for a newer valid step that often.
class ModelServer {
 public:
  ModelServer(std::vector<std::unique_ptr<BatchRunner>> runners, const CheckpointSource& source,
              std::int64_t classes, const ServeOptions& options, ServeMetrics& metrics);
  ~ModelServer();
  ModelServer(const ModelServer&) = delete;
  ModelServer& operator=(const ModelServer&) = delete;

  RequestBatcher& batcher() noexcept { return batcher_; }
  /// The newest checkpoint offered (the one being or about to be served).
  CheckpointSource current() const;
  /// Serve `source` from now on if its step is newer than the current one.
  void offer(const CheckpointSource& source);
  /// Finishes every queued request, then stops the runners and joins the threads. Idempotent.
  void shutdown();

 private:
  void run_worker(std::size_t index);
  void run_batch(BatchRunner& runner, const RequestBatch& batch);
  void watch_checkpoints();

  const ServeOptions options_;
  const std::int64_t classes_;
  ServeMetrics& metrics_;
  RequestBatcher batcher_;
  std::vector<std::unique_ptr<BatchRunner>> runners_;
  mutable std::mutex mutex_;
  std::condition_variable stopping_changed_;
  CheckpointSource current_;
  std::uint64_t generation_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
  std::thread watcher_;
};

}  // namespace hpctrain::serve
