#include "hpctrain/serve/serve_metrics.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace hpctrain::serve {

Histogram::Histogram(std::vector<double> upper_bounds) : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  const auto bucket = static_cast<std::size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin());
  const std::lock_guard<std::mutex> lock(mutex_);
  ++counts_[bucket];
  sum_ += value;
  ++count_;
}

std::string Histogram::render(const std::string& name, const std::string& help) const {
  const std::lock_guard<std::mutex> lock(mutex_);
  std::string out = fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  std::uint64_t cumulative = 0;
  for (std::size_t b = 0; b < bounds_.size(); ++b) {
    cumulative += counts_[b];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bounds_[b], cumulative);
  }
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, count_, name, sum_, name, count_);
  return out;
}

// Batch sizes: powers of two up to --max-instances' default; latencies: 0.25 ms to 10 s.
ServeMetrics::ServeMetrics()
    : batch_size_({1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}),
      latency_({0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}) {}

void ServeMetrics::count_request(int status, double latency_s) {
  ++requests_;
  if (status >= 400) ++errors_;
  latency_.observe(latency_s);
}

void ServeMetrics::count_batch(std::int64_t instances) {
  instances_ += static_cast<std::uint64_t>(instances);
  batch_size_.observe(static_cast<double>(instances));
}

std::string ServeMetrics::render() const {
  std::string out;
  out += fmt::format("# HELP hpctrain_requests_total POST /v1/predict requests answered.\n"
                     "# TYPE hpctrain_requests_total counter\nhpctrain_requests_total {}\n",
                     requests_.load());
  out += fmt::format("# HELP hpctrain_request_errors_total POST /v1/predict requests answered with a status >= 400.\n"
                     "# TYPE hpctrain_request_errors_total counter\nhpctrain_request_errors_total {}\n",
                     errors_.load());
  out += fmt::format("# HELP hpctrain_instances_total Instances predicted.\n"
                     "# TYPE hpctrain_instances_total counter\nhpctrain_instances_total {}\n",
                     instances_.load());
  out += fmt::format("# HELP hpctrain_model_step Checkpoint step being served.\n"
                     "# TYPE hpctrain_model_step gauge\nhpctrain_model_step {}\n",
                     model_step_.load());
  out += batch_size_.render("hpctrain_batch_size", "Instances per forward pass.");
  out += latency_.render("hpctrain_request_latency_seconds",
                         "Time from a POST /v1/predict request's arrival to its answer.");
  return out;
}

}  // namespace hpctrain::serve
