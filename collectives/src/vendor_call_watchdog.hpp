#pragma once
// A watchdog for blocking calls into the MPI library (MPI_Allreduce for --algo mpi, the
// MPI_Comm_split / MPI_Win_allocate_shared of the shared-memory set-up). Our own algorithms
// poll with a deadline and throw TimeoutError; a vendor collective cannot be interrupted, so a
// missing peer would block it forever. While a VendorCallWatch is alive, one background thread
// (started on first use) ends the job when the call outlives its timeout: it prints one line
// naming the call, this rank and the ranks it may be waiting for, then MPI_Abort.

#include <cstddef>
#include <cstdint>

#include "hpctrain/collectives/types.hpp"

namespace hpctrain::coll::detail {

/// What a watched call is, formatted only when the watchdog fires.
struct VendorCallInfo {
  const char* call = "";         ///< e.g. "MPI_Allreduce"
  const char* operation = "";    ///< e.g. "allreduce(mpi)"
  std::uint64_t sequence = 0;    ///< the communicator's collective number
  std::size_t count = 0;         ///< elements (0: not an all-reduce)
  DataType type = DataType::f32;
  int ranks = 1;                 ///< size of the communicator
};

/// Scope of one blocking vendor call. Not copyable; `timeout_s` <= 0 watches nothing.
class VendorCallWatch {
 public:
  VendorCallWatch(const VendorCallInfo& info, double timeout_s);
  ~VendorCallWatch();
  VendorCallWatch(const VendorCallWatch&) = delete;
  VendorCallWatch& operator=(const VendorCallWatch&) = delete;

 private:
  std::uint64_t id_ = 0;  // 0: not registered
};

}  // namespace hpctrain::coll::detail
