#include "hpctrain/collectives/error.hpp"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <string>

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

void abort_job(const std::exception& e, int exit_code) noexcept {
  std::fprintf(stderr, "hpctrain: error: %s\n", e.what());
  std::fflush(stderr);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, exit_code);
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
