#pragma once
/// @file
/// hpctrain's one error type and the checking macros every part uses (library hpctrain::base,
/// the bottom layer: collectives, core, io and models all link it).
///
/// Errors are exceptions that carry the source location and the MPI rank (when known). They are
/// converted to one clear line at the library boundary (the CLI prints it and aborts the job so
/// no rank hangs). Destructors never throw.

#include <stdexcept>
#include <string>

namespace hpctrain {

/// Any hpctrain failure: a bad argument, a failed MPI/UCX/HDF5 call, a timeout.
class Error : public std::runtime_error {
 public:
  Error(const std::string& what, const char* file, int line);
  /// The message without location, as given by the thrower.
  const std::string& reason() const noexcept { return reason_; }
  const char* file() const noexcept { return file_; }
  int line() const noexcept { return line_; }
  /// The MPI world rank of the thrower, or -1 before MPI is initialised.
  int rank() const noexcept { return rank_; }

 private:
  std::string reason_;
  const char* file_;
  int line_;
  int rank_;
};

/// A collective did not complete within its timeout; what() names the peers it waited for.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

/// A timeout waiting for ranks of this node (shared memory) that are alive but stuck, most
/// likely in a wait of their own on a peer elsewhere (hierarchical: one local rank waits on the
/// network while the others wait for it at the node barrier). That rank's report names the real
/// cause, so abort_job lets it come first (kSecondaryReportDelayS).
class SecondaryTimeoutError : public TimeoutError {
 public:
  using TimeoutError::TimeoutError;
};

/// This rank stops because another rank failed and reports the cause itself (rank 0's verdict
/// that every rank received). abort_job prints nothing for it, so the cause appears once.
class PeerReportedError : public Error {
 public:
  using Error::Error;
};

/// The world rank of this process (MPI_COMM_WORLD), or -1 when MPI is not initialised (always
/// in a build without MPI, HPCTRAIN_ENABLE_MPI=OFF: errors then name no rank).
int world_rank() noexcept;

/// True while this thread unwinds from an exception. Destructors of handles whose release waits
/// for peers (MPI_Win_free, a progress thread mid-collective) then leak them instead: a peer may
/// never arrive, and the error must reach the CLI, which ends the job, without blocking.
bool unwinding_from_error() noexcept;

/// The library boundary for programs: prints `hpctrain: error: <what>` on stderr once and ends
/// the whole job (MPI_Abort on MPI_COMM_WORLD when MPI is up, so no rank hangs; std::exit with
/// `exit_code` otherwise, and always in a build without MPI).
///
/// So that a failure seen by every rank is printed once: rank 0 prints at once; any other rank
/// waits `kPeerReportGraceS` first (rank 0's abort, when it fails too, ends it in that time);
/// a SecondaryTimeoutError waits `kSecondaryReportDelayS` on every rank, rank 0 included, so
/// the report of the rank it waited for (which timed out on its own peer) comes first;
/// a PeerReportedError is not printed (the rank that decided prints), only a short line after
/// a longer grace if that rank's abort never came.
[[noreturn]] void abort_job(const std::exception& e, int exit_code = 1) noexcept;

/// A function abort_job runs before ending the job (e.g. removing a lock file this process
/// holds); it must not throw, block or take locks. At most 8 are kept; later ones are ignored.
using AbortCleanup = void (*)() noexcept;
void add_abort_cleanup(AbortCleanup cleanup) noexcept;

/// Seconds a rank other than 0 waits before printing its error (see abort_job). Long against
/// MPI_Abort's kill of the other ranks (milliseconds), short against a person waiting.
inline constexpr double kPeerReportGraceS = 2.0;
/// Seconds a SecondaryTimeoutError waits before printing: beyond kPeerReportGraceS, so a primary
/// timeout on a rank other than 0 still prints (and aborts the job) first.
inline constexpr double kSecondaryReportDelayS = 2 * kPeerReportGraceS;

}  // namespace hpctrain

/// Throws hpctrain::Error with `msg` (anything convertible to std::string) unless `cond` holds.
#define HPCTRAIN_REQUIRE(cond, msg)                                   \
  do {                                                                \
    if (!(cond)) throw ::hpctrain::Error((msg), __FILE__, __LINE__);  \
  } while (0)

/// Throws hpctrain::Error with `msg`.
#define HPCTRAIN_FAIL(msg) throw ::hpctrain::Error((msg), __FILE__, __LINE__)
