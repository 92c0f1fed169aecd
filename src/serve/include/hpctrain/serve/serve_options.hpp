#pragma once
/// @file
/// Every knob of `hpctrain serve` (its flags) and its default, in one place.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace hpctrain::serve {

struct ServeOptions {
  std::string checkpoint;           ///< checkpoint directory (newest valid step) or one step-<N>
  std::string host = "127.0.0.1";   ///< loopback only unless asked: the server has no authentication
  int port = 8080;                  ///< 0: any free port (printed on the "serving on" line)
  std::int64_t max_batch = 64;      ///< instances per forward pass at most (a larger request runs alone)
  /// How long a batch that is not full may wait for requests still being read and parsed; a
  /// batch runs at once when no other request is on its way (an idle server adds no wait).
  std::int64_t max_wait_us = 2000;
  std::size_t max_body_bytes = std::size_t{16} << 20;  ///< larger bodies: 413
  std::int64_t max_instances = 1024;                   ///< per request; more: 400
  double reload_every_s = 0.0;  ///< look for a newer checkpoint every S seconds (0: never)
  /// HTTP worker threads on rank 0. cpp-httplib keeps one thread per open keep-alive
  /// connection, so this bounds the concurrent connections served without queueing.
  int http_threads = 128;
  int keep_alive_max_requests = 100000;  ///< requests per connection before it is closed
  double stop_poll_s = 0.02;             ///< how often rank 0 looks at the SIGTERM flag
};

/// How the ranks wait for each other's messages (rank_workers.cpp). Open MPI's blocking calls
/// poll without pause, so an idle rank (or rank 0's thread waiting for a rank's result) would
/// keep a core busy that the HTTP threads and the other ranks need: measured at 2 ranks on 2
/// cores, P = 2 served fewer requests than P = 1. A wait tests this many times back to back
/// (a reply that is nearly there), then sleeps between tests.
inline constexpr int kMessageSpinTests = 200;
inline constexpr std::chrono::microseconds kMessagePollPause{20};  ///< adds at most this to a reply

}  // namespace hpctrain::serve
