#pragma once
/// @file
/// A transport whose ranks are threads of one process: fast tests at 1..16 ranks, no launcher.
///
/// ```
///   auto group = hpctrain::coll::make_loopback_group(4);   // one transport per rank
///   // hand group[r] to the thread that plays rank r
/// ```
/// Sends are eager (copied at once); receives match by (source, tag) in posting order, as in MPI.
/// run_loopback_ranks does the threads too: each rank gets its own Communicator.

#include <functional>
#include <memory>
#include <vector>

#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/collectives/transport.hpp"
#include "hpctrain/collectives/tuning.hpp"

namespace hpctrain::coll {

/// `ranks` connected transports; element r is rank r. Each must be used by one thread at a time.
std::vector<std::unique_ptr<Transport>> make_loopback_group(int ranks);

/// Runs fn on `ranks` loopback ranks, one thread each, every rank with its own Communicator
/// built with `tuning`; returns when all threads have joined and then rethrows the first
/// exception any rank threw.
void run_loopback_ranks(int ranks, const Tuning& tuning, const std::function<void(Communicator&)>& fn);

}  // namespace hpctrain::coll
