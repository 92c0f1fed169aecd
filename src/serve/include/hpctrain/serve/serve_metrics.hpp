#pragma once
/// @file
/// ServeMetrics: the counters and histograms of GET /metrics (Prometheus text format 0.0.4).

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace hpctrain::serve {

/// A Prometheus histogram: cumulative `_bucket{le="..."}` counts, `_sum` and `_count`.
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double value);
  /// The lines of the histogram named `name` (with its HELP and TYPE lines).
  std::string render(const std::string& name, const std::string& help) const;

 private:
  std::vector<double> bounds_;
  mutable std::mutex mutex_;
  std::vector<std::uint64_t> counts_;  ///< per bucket, not cumulative; the last is +Inf
  double sum_ = 0.0;
  std::uint64_t count_ = 0;
};

/// What the server counts. Thread-safe.
///   hpctrain_requests_total            POST /v1/predict requests answered (any status)
///   hpctrain_request_errors_total      of those, answered with a status >= 400
///   hpctrain_instances_total           instances predicted
///   hpctrain_batch_size                instances per forward pass (histogram)
///   hpctrain_request_latency_seconds   from the request's arrival to its answer (histogram)
///   hpctrain_model_step                the checkpoint step being served (gauge)
class ServeMetrics {
 public:
  ServeMetrics();
  void count_request(int status, double latency_s);
  void count_batch(std::int64_t instances);
  void set_model_step(std::int64_t step) { model_step_ = step; }
  std::string render() const;

 private:
  std::atomic<std::uint64_t> requests_{0}, errors_{0}, instances_{0};
  std::atomic<std::int64_t> model_step_{0};
  Histogram batch_size_, latency_;
};

}  // namespace hpctrain::serve
