#pragma once
// The pieces of the node shared-memory schedule that every shm collective shares (defined in
// shm_allreduce.cpp, whose comment has the memory layout and the memory-ordering argument):
// the staging buffers of each local rank, used in turn by steps k = 0, 1, ... across calls
// (NodeGroup::next_segment), and the progress counter each rank publishes through a step as
// kPhases·k + 1 (staged), + 2 (reduced), + 3 (done reading step k's buffers).

#include <cstddef>
#include <cstdint>

#include "algorithms.hpp"

namespace hpctrain::coll::detail {

/// Staging buffers per rank, used in turn. More would not let ranks drift further apart: a rank
/// starts segment k only after every rank has reduced segment k-1 (so copied out k-2).
inline constexpr std::uint64_t kSlots = 2;
/// Phases per segment: staged (3k+1), reduced (3k+2), copied out (3k+3).
inline constexpr std::uint64_t kPhases = 3;

/// Local rank q's staging buffer of step `segment` (NodeGroup::segment_bytes bytes).
std::byte* staging(const NodeGroup& g, int q, std::uint64_t segment);
/// Publishes this rank's progress (release: everything it wrote or read before is ordered first).
void publish(const NodeGroup& g, std::uint64_t value);
/// Waits until every other local rank has published at least `value` (acquire), spinning then
/// yielding; a TimeoutError naming the ranks still behind after the collective timeout.
void wait_for_all(const NodeGroup& g, const WaitPolicy& policy, std::uint64_t value);
/// Before staging step k: every rank is done reading step k - kSlots (the same buffers).
void wait_slot_free(const NodeGroup& g, const WaitPolicy& policy, std::uint64_t k);
/// out = staging(0) ⊕ staging(1) ⊕ ... ⊕ staging(m-1) of step k over `count` elements from byte
/// `at`, in local-rank order (so every rank computing it gets the same bits, whatever the timing).
void reduce_staged(const NodeGroup& g, std::uint64_t k, void* out, std::size_t at, std::size_t count,
                   DataType type, ReduceOp op);

}  // namespace hpctrain::coll::detail
