#pragma once
// Runs a test body on `ranks` loopback ranks (threads of this process), each with its own
// Communicator; the first exception of any rank is rethrown after all threads joined.

#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/collectives/loopback_transport.hpp"

namespace hpctrain::coll::testing {

inline void run_loopback_ranks(int ranks, const Tuning& tuning, const std::function<void(Communicator&)>& fn) {
  auto group = make_loopback_group(ranks);
  std::vector<std::thread> threads;
  std::exception_ptr error;
  std::mutex error_mutex;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      try {
        Communicator comm(std::move(group[static_cast<std::size_t>(r)]), tuning);
        fn(comm);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace hpctrain::coll::testing
