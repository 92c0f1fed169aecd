#pragma once
/// @file
/// The point-to-point interface every collective algorithm is written against.
///
/// A Transport moves bytes between the ranks of one group: post a send or a receive, then test
/// it until it completes. Algorithms never see MPI or UCX types; a new backend is a new
/// subclass (MpiTransport, LoopbackTransport, UcxTransport).
///
/// Threading: one thread at a time uses a given Transport (the Communicator guarantees this).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hpctrain/collectives/types.hpp"

namespace hpctrain::coll {

/// Message tag. Transports accept tags below 2^28 (MPI_TAG_UB is at least 2^15 by the standard,
/// 2^31-1 in Open MPI and MPICH; MpiTransport checks the bound it is given).
using Tag = std::uint32_t;

/// A posted send or receive. `slot` is the transport's handle, -1 once complete.
/// Memory that every rank of one transport can load from and store to directly (an MPI-3
/// shared-memory window, or one heap block when the ranks are threads). Rank r owns
/// segment(r); each segment holds the bytes_per_rank asked for, page-aligned. Non-copyable;
/// freeing it (the MPI window) happens in the destructor, only while MPI is up, and never throws.
class SharedSegments {
 public:
  SharedSegments() = default;
  virtual ~SharedSegments() = default;
  SharedSegments(const SharedSegments&) = delete;
  SharedSegments& operator=(const SharedSegments&) = delete;
  /// Start of rank `rank`'s segment, as this rank addresses it.
  virtual std::byte* segment(int rank) const noexcept = 0;
  /// Usable bytes of each segment.
  virtual std::size_t bytes_per_rank() const noexcept = 0;
};

struct Request {
  std::int32_t slot = -1;
  std::int32_t peer = -1;
  bool is_send = false;
  bool done() const noexcept { return slot < 0; }
};

class Transport {
 public:
  virtual ~Transport() = default;
  Transport() = default;
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  virtual int rank() const noexcept = 0;
  virtual int size() const noexcept = 0;
  /// "mpi", "loopback", "ucx".
  virtual std::string name() const = 0;
  /// The MPI_COMM_WORLD rank of `peer` (a rank of this transport), for diagnostics: a timeout in
  /// a sub-group (hierarchical's inter-node step) names the process the user knows, not its
  /// place in the group. Identity where there is no world (loopback) or the lookup fails.
  virtual int world_rank(int peer) const noexcept { return peer; }

  /// Posts a send of `bytes` bytes to `peer`; `buf` must stay valid until the request completes.
  virtual Request isend(const void* buf, std::size_t bytes, int peer, Tag tag) = 0;
  /// Posts a receive of exactly `bytes` bytes from `peer` into `buf`.
  virtual Request irecv(void* buf, std::size_t bytes, int peer, Tag tag) = 0;
  /// Makes progress; returns true (and marks `r` done) once `r` has completed. Done requests
  /// return true at once.
  virtual bool test(Request& r) = 0;

  /// A new transport over the ranks that passed the same `color`, ordered by (key, rank).
  /// Collective over this transport's ranks.
  virtual std::unique_ptr<Transport> split(int color, int key) = 0;

  /// Which ranks can share memory: element r identifies rank r's machine (equal values: same
  /// machine). Collective over this transport's ranks. Default: every rank on its own machine.
  virtual std::vector<int> shared_memory_domains() {
    std::vector<int> d(static_cast<std::size_t>(size()));
    for (int r = 0; r < size(); ++r) d[static_cast<std::size_t>(r)] = r;
    return d;
  }
  /// Allocates `bytes_per_rank` bytes per rank that every rank of this transport addresses
  /// directly. Collective; every rank passes the same size. Throws hpctrain::Error when the
  /// transport cannot share memory or its ranks are not all on one machine. The memory's
  /// contents are unspecified until written.
  virtual std::unique_ptr<SharedSegments> shared_memory(std::size_t bytes_per_rank);

  /// The vendor's all-reduce (MPI_Allreduce) when this transport has one; false otherwise.
  /// `send` may equal `recv` (in place).
  virtual bool vendor_allreduce(const void* send, void* recv, std::size_t count, DataType type,
                                ReduceOp op) {
    return false;
  }
};

/// How long waits may take before they fail, and how they spin.
struct WaitPolicy {
  /// Zero or negative: wait forever.
  std::chrono::duration<double> timeout{0.0};
  /// Fruitless polls before yielding the core between polls (Tuning::spin_polls).
  std::size_t spin_polls = 64;
  /// Name of the operation, for the timeout diagnostic ("allreduce(ring) #12"). When empty and
  /// `op` is set, the diagnostic is composed from the fields below, only when it is needed:
  /// formatting a string on every call costs a measurable part of a small all-reduce.
  std::string what;
  const char* op = nullptr;            ///< "allreduce"
  Algorithm algorithm = Algorithm::automatic;
  std::uint64_t sequence = 0;          ///< the communicator's collective number
  const Transport* transport = nullptr;

  /// The operation's name for diagnostics.
  std::string description() const;
};

/// Waits until every request in [reqs, reqs+n) is done. On timeout throws TimeoutError naming
/// the peers whose sends/receives were still pending.
void wait_all(Transport& t, Request* reqs, std::size_t n, const WaitPolicy& policy);
inline void wait_all(Transport& t, std::vector<Request>& reqs, const WaitPolicy& policy) {
  wait_all(t, reqs.data(), reqs.size(), policy);
}
/// Waits until at least one not-done request of [reqs, reqs+n) completes; returns its index.
/// Requires at least one not-done request.
std::size_t wait_any(Transport& t, Request* reqs, std::size_t n, const WaitPolicy& policy);

}  // namespace hpctrain::coll
