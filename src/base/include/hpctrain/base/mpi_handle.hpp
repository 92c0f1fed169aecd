#pragma once
/// @file
/// RAII MPI handles (UniqueHandle): freed only while MPI is up.

#ifndef HPCTRAIN_HAVE_MPI
#error "hpctrain/base/mpi_handle.hpp needs MPI: this hpctrain was configured with HPCTRAIN_ENABLE_MPI=OFF"
#endif
#include <mpi.h>

#include "hpctrain/base/mpi_error.hpp"
#include "hpctrain/base/unique_handle.hpp"

namespace hpctrain {

/// UniqueHandle traits of an MPI communicator (MPI_Comm_free).
struct MpiCommTraits {
  using handle_type = MPI_Comm;
  static handle_type null() noexcept { return MPI_COMM_NULL; }
  static bool is_null(handle_type c) noexcept { return c == MPI_COMM_NULL; }
  static bool library_up() noexcept { return mpi_is_up(); }
  static void free(handle_type c) noexcept { MPI_Comm_free(&c); }
};

/// Owns an MPI communicator.
using MpiCommHandle = UniqueHandle<MpiCommTraits>;

/// A duplicate of `comm`, owned (throws hpctrain::Error when MPI_Comm_dup fails).
inline MpiCommHandle duplicate_comm(MPI_Comm comm) {
  MPI_Comm dup = MPI_COMM_NULL;
  HPCTRAIN_CHECK_MPI(MPI_Comm_dup(comm, &dup));
  return MpiCommHandle(dup);
}

}  // namespace hpctrain
