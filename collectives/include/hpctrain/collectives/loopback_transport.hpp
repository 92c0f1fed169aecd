#pragma once
/// @file
/// A transport whose ranks are threads of one process: fast tests at 1..16 ranks, no launcher.
///
/// ```
///   auto group = hpctrain::coll::make_loopback_group(4);   // one transport per rank
///   // hand group[r] to the thread that plays rank r
/// ```
/// Sends are eager (copied at once); receives match by (source, tag) in posting order, as in MPI.

#include <memory>
#include <vector>

#include "hpctrain/collectives/transport.hpp"

namespace hpctrain::coll {

/// `ranks` connected transports; element r is rank r. Each must be used by one thread at a time.
std::vector<std::unique_ptr<Transport>> make_loopback_group(int ranks);

}  // namespace hpctrain::coll
