#include "sweep_coordinator.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "hpctrain/base/error.hpp"
#include "hpctrain/train/preemption.hpp"

namespace hpctrain::sweep {

using nlohmann::json;

SweepCoordinator::SweepCoordinator(SweepLedger& ledger, TrialChannel& channel, int groups, bool quiet)
    : ledger_(ledger), channel_(channel), groups_left_(groups), quiet_(quiet) {
  thread_ = std::thread([this] { loop(); });
}

SweepCoordinator::~SweepCoordinator() {
  if (thread_.joinable()) thread_.join();
}

void SweepCoordinator::join() {
  if (thread_.joinable()) thread_.join();
  if (error_) std::rethrow_exception(error_);
}

void SweepCoordinator::loop() noexcept {
  // Idle polls back off from 1 to 16 ms: the thread shares rank 0's cores with its training,
  // and a decision arriving a few ms late costs nothing against an epoch.
  auto idle = std::chrono::milliseconds(1);
  try {
    while (groups_left_ > 0) {
      if (train::preemption_requested() && !ledger_.stopping()) {
        ledger_.stop_handing_out();
        serve_waiting();
      }
      json message;
      int source = 0, tag = 0;
      if (channel_.poll(&message, &source, &tag)) {
        handle(message, source, tag);
        idle = std::chrono::milliseconds(1);
      } else {
        std::this_thread::sleep_for(idle);
        idle = std::min(idle * 2, std::chrono::milliseconds(16));
      }
    }
  } catch (...) {
    // The leaders would wait for replies that never come: end the job with the cause.
    error_ = std::current_exception();
    try {
      std::rethrow_exception(error_);
    } catch (const std::exception& e) {
      abort_job(e, 1);
    }
  }
}

void SweepCoordinator::handle(const json& message, int source, int tag) {
  switch (tag) {
    case kRequest:
      waiting_.push_back(source);
      serve_waiting();
      return;
    case kReport:
      channel_.reply(source, kDecision, ledger_.report(message));
      return;
    case kFinished:
      ledger_.finished(message);
      if (!quiet_) {
        std::printf("sweep: trial %lld %s: %s %s, %lld epochs, %.1f s%s\n",
                    static_cast<long long>(message.at("trial").get<std::int64_t>()),
                    message.at("status").get<std::string>().c_str(), "test_accuracy",
                    message.at("test_accuracy").dump().c_str(),
                    static_cast<long long>(message.at("epochs_run").get<std::int64_t>()),
                    message.at("seconds").get<double>(),
                    message.contains("error") ? (" (" + message.at("error").get<std::string>() + ")").c_str() : "");
        std::fflush(stdout);
      }
      serve_waiting();
      return;
    default:
      return;
  }
}

void SweepCoordinator::serve_waiting() {
  while (!waiting_.empty()) {
    json assignment;
    const SweepLedger::Next next = ledger_.next(&assignment);
    if (next == SweepLedger::Next::wait) return;
    const int leader = waiting_.front();
    waiting_.erase(waiting_.begin());
    if (next == SweepLedger::Next::done) {
      channel_.reply(leader, kAssign, json{{"done", true}});
      --groups_left_;
      continue;
    }
    if (!quiet_) {
      std::printf("sweep: trial %lld on the group of world rank %d: %s\n",
                  static_cast<long long>(assignment.at("trial").get<std::int64_t>()), leader,
                  assignment.at("params").dump().c_str());
      std::fflush(stdout);
    }
    channel_.reply(leader, kAssign, assignment);
  }
}

}  // namespace hpctrain::sweep
