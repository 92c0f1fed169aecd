#pragma once
/// @file
/// Every knob of `hpctrain serve` (its flags) and its default, in one place.

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

}  // namespace hpctrain::serve
