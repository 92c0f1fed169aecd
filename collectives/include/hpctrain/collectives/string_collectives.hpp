#pragma once
/// @file
/// Strings through the collectives: each string travels as 64-bit words (its bytes, zero-padded
/// to a whole word), its length beside it, so any bytes (NUL included) arrive unchanged.

#include <string>
#include <vector>

#include "hpctrain/collectives/communicator.hpp"

namespace hpctrain::coll {

/// Copies rank 0's string to every rank (collective; the argument is ignored on other ranks).
std::string broadcast_string(Communicator& comm, const std::string& s);

/// Every rank's string, in rank order, on every rank (collective; two all-gathers: the lengths,
/// then every string padded to the longest).
std::vector<std::string> allgather_strings(Communicator& comm, const std::string& s);

}  // namespace hpctrain::coll
