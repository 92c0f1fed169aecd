#include "hpctrain/serve/model_server.hpp"

#include <cstdio>
#include <exception>

namespace hpctrain::serve {

ModelServer::ModelServer(std::vector<std::unique_ptr<BatchRunner>> runners, const CheckpointSource& source,
                         std::int64_t classes, const ServeOptions& options, ServeMetrics& metrics)
    : options_(options),
      classes_(classes),
      metrics_(metrics),
      batcher_(options.max_batch, std::chrono::microseconds(options.max_wait_us)),
      runners_(std::move(runners)),
      current_(source) {
  metrics_.set_model_step(source.step);
  for (std::size_t i = 0; i < runners_.size(); ++i) workers_.emplace_back([this, i] { run_worker(i); });
  if (options_.reload_every_s > 0 && is_checkpoint_directory(options_.checkpoint)) {
    watcher_ = std::thread([this] { watch_checkpoints(); });
  }
}

ModelServer::~ModelServer() { shutdown(); }

CheckpointSource ModelServer::current() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return current_;
}

void ModelServer::offer(const CheckpointSource& source) {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (source.step <= current_.step) return;
  current_ = source;
  ++generation_;
  metrics_.set_model_step(source.step);
  std::printf("hpctrain: serve: reloading %s (step %lld) on every rank before its next batch\n", source.step_dir.c_str(),
              static_cast<long long>(source.step));
  std::fflush(stdout);
}

void ModelServer::shutdown() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_ && workers_.empty()) return;
    stopping_ = true;
  }
  stopping_changed_.notify_all();
  batcher_.close();
  for (auto& t : workers_) t.join();
  workers_.clear();
  if (watcher_.joinable()) watcher_.join();
  for (auto& r : runners_) r->stop();
}

void ModelServer::run_worker(std::size_t index) {
  BatchRunner& runner = *runners_[index];
  std::uint64_t loaded = 0;
  for (;;) {
    CheckpointSource wanted;
    std::uint64_t generation = 0;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      generation = generation_;
      wanted = current_;
    }
    if (generation != loaded) {
      try {
        runner.reload(wanted);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "hpctrain: serve: runner %zu keeps its model: %s\n", index, e.what());
      }
      loaded = generation;
    }
    const RequestBatch batch = batcher_.next_batch(/*preferred=*/index == 0);  // runner 0: rank 0's own model
    if (batch.empty()) return;
    run_batch(runner, batch);
  }
}

void ModelServer::run_batch(BatchRunner& runner, const RequestBatch& batch) {
  std::int64_t rows = 0;
  for (const auto& r : batch) rows += r->rows;
  std::vector<float> x;
  x.reserve(batch.empty() ? 0 : static_cast<std::size_t>(rows) * (batch[0]->instances.size() / static_cast<std::size_t>(batch[0]->rows)));
  for (const auto& r : batch) x.insert(x.end(), r->instances.begin(), r->instances.end());
  std::vector<float> p(static_cast<std::size_t>(rows * classes_));
  std::vector<std::int32_t> y(static_cast<std::size_t>(rows));
  std::string error;
  std::int64_t step = 0;
  try {
    step = runner.run(x.data(), rows, p.data(), y.data());
  } catch (const std::exception& e) {
    error = e.what();
  }
  metrics_.count_batch(rows);
  std::size_t row = 0;
  for (const auto& r : batch) {
    const auto n = static_cast<std::size_t>(r->rows);
    const auto k = static_cast<std::size_t>(classes_);
    r->error = error;
    r->model_step = step;
    r->probabilities.assign(p.begin() + static_cast<std::ptrdiff_t>(row * k), p.begin() + static_cast<std::ptrdiff_t>((row + n) * k));
    r->predictions.assign(y.begin() + static_cast<std::ptrdiff_t>(row), y.begin() + static_cast<std::ptrdiff_t>(row + n));
    row += n;
    r->done.set_value();
  }
}

void ModelServer::watch_checkpoints() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (stopping_changed_.wait_for(lock, std::chrono::duration<double>(options_.reload_every_s), [&] { return stopping_; })) {
        return;
      }
    }
    try {
      offer(resolve_checkpoint(options_.checkpoint));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "hpctrain: serve: no newer checkpoint loaded: %s\n", e.what());
    }
  }
}

}  // namespace hpctrain::serve
