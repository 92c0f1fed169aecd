#include "hpctrain/base/error.hpp"

#ifdef HPCTRAIN_HAVE_MPI
#include <mpi.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>

#ifdef HPCTRAIN_HAVE_MPI
#include "hpctrain/base/mpi_error.hpp"
#endif

namespace hpctrain {

#ifdef HPCTRAIN_HAVE_MPI
int world_rank() noexcept {
  if (!mpi_is_up()) return -1;
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}
#else
int world_rank() noexcept { return -1; }  // one process, no MPI: errors carry no rank
namespace {
bool mpi_is_up() noexcept { return false; }
}  // namespace
#endif

namespace {
constexpr int kMaxAbortCleanups = 8;
std::atomic<AbortCleanup> abort_cleanups[kMaxAbortCleanups];
std::atomic<int> abort_cleanup_count{0};
}  // namespace

void add_abort_cleanup(AbortCleanup cleanup) noexcept {
  const int slot = abort_cleanup_count.fetch_add(1);
  if (slot < kMaxAbortCleanups) abort_cleanups[slot].store(cleanup);
}

bool unwinding_from_error() noexcept { return std::uncaught_exceptions() > 0; }

void abort_job(const std::exception& e, int exit_code) noexcept {
  const bool mpi_up = mpi_is_up();
  const int rank = mpi_up ? world_rank() : -1;
  const auto grace = std::chrono::duration<double>(kPeerReportGraceS);
  if (dynamic_cast<const PeerReportedError*>(&e) != nullptr) {
    // The deciding rank prints and aborts the job, which ends this rank too; speak only if
    // that never happens (it was stopped or killed without a word).
    std::this_thread::sleep_for(10 * grace);
    std::fprintf(stderr, "hpctrain: error: %s (its report did not arrive)\n", e.what());
  } else if (dynamic_cast<const SecondaryTimeoutError*>(&e) != nullptr) {
    std::this_thread::sleep_for(std::chrono::duration<double>(kSecondaryReportDelayS));
    std::fprintf(stderr, "hpctrain: error: %s\n", e.what());
  } else {
    if (rank > 0) std::this_thread::sleep_for(grace);
    std::fprintf(stderr, "hpctrain: error: %s\n", e.what());
  }
  std::fflush(stderr);
  const int cleanups = std::min(abort_cleanup_count.load(), kMaxAbortCleanups);
  for (int i = 0; i < cleanups; ++i) {
    if (const AbortCleanup cleanup = abort_cleanups[i].load()) cleanup();
  }
#ifdef HPCTRAIN_HAVE_MPI
  if (mpi_up) MPI_Abort(MPI_COMM_WORLD, exit_code);
#endif
  std::exit(exit_code);
}

namespace {
std::string located(const std::string& what, const char* file, int line, int rank) {
  std::string s = rank >= 0 ? "rank " + std::to_string(rank) + ": " : std::string();
  s += what;
  s += " [";
  s += file;
  s += ':';
  s += std::to_string(line);
  s += ']';
  return s;
}
}  // namespace

Error::Error(const std::string& what, const char* file, int line)
    : std::runtime_error(located(what, file, line, world_rank())),
      reason_(what),
      file_(file),
      line_(line),
      rank_(world_rank()) {}

}  // namespace hpctrain
