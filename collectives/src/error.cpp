#include "hpctrain/collectives/error.hpp"

#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>

namespace hpctrain {

int world_rank() noexcept {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return -1;
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

bool unwinding_from_error() noexcept { return std::uncaught_exceptions() > 0; }

void abort_job(const std::exception& e, int exit_code) noexcept {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  const bool mpi_up = initialized && !finalized;
  const int rank = mpi_up ? world_rank() : -1;
  const auto grace = std::chrono::duration<double>(kPeerReportGraceS);
  if (dynamic_cast<const PeerReportedError*>(&e) != nullptr) {
    // The deciding rank prints and aborts the job, which ends this rank too; speak only if
    // that never happens (it was stopped or killed without a word).
    std::this_thread::sleep_for(10 * grace);
    std::fprintf(stderr, "hpctrain: error: %s (its report did not arrive)\n", e.what());
  } else {
    if (rank > 0) std::this_thread::sleep_for(grace);
    std::fprintf(stderr, "hpctrain: error: %s\n", e.what());
  }
  std::fflush(stderr);
  if (mpi_up) MPI_Abort(MPI_COMM_WORLD, exit_code);
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
