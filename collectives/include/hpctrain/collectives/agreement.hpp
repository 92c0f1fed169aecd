#pragma once
/// @file
/// "Rank 0 decides, every rank agrees": a check done once (a file opened, a directory probed)
/// whose verdict every rank acts on, so all ranks stop together and the cause is printed once.

#include <exception>
#include <functional>
#include <string>

#include "hpctrain/collectives/communicator.hpp"
#include "hpctrain/collectives/string_collectives.hpp"  // broadcast_string

namespace hpctrain::coll {

/// Collective: rank 0's verdict `error` (null = fine; ignored on other ranks) reaches every
/// rank. When rank 0 failed, it rethrows its exception and every other rank throws
/// PeerReportedError (abort_job prints nothing for it), so the cause is printed once, by rank 0.
void agree_with_rank0(Communicator& comm, const std::exception_ptr& error);

/// Collective: runs `check` on rank 0 only, then agree_with_rank0 on what it threw.
void rank0_decides(Communicator& comm, const std::function<void()>& check);

}  // namespace hpctrain::coll
