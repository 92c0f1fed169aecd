#pragma once
// The tests' name for hpctrain::coll::run_loopback_ranks (loopback_transport.hpp): a test body
// on `ranks` loopback ranks (threads), each with its own Communicator; the first exception of
// any rank is rethrown after all threads joined.

#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/collectives/loopback_transport.hpp"

namespace hpctrain::coll::testing {

using hpctrain::coll::run_loopback_ranks;

}  // namespace hpctrain::coll::testing
