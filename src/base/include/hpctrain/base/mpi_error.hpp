#pragma once
/// @file
/// MPI calls checked into hpctrain::Error, and whether MPI is usable right now.

#ifndef HPCTRAIN_HAVE_MPI
#error "hpctrain/base/mpi_error.hpp needs MPI: this hpctrain was configured with HPCTRAIN_ENABLE_MPI=OFF"
#endif
#include <mpi.h>

#include <string>

#include "hpctrain/base/error.hpp"

namespace hpctrain {

/// The MPI error string of `code`.
std::string mpi_error_string(int code);

/// MPI is initialised and not yet finalised: MPI handles may be freed (and MPI called) only then.
bool mpi_is_up() noexcept;

}  // namespace hpctrain

/// Throws hpctrain::Error naming the call and MPI's error string unless it returns MPI_SUCCESS.
#define HPCTRAIN_CHECK_MPI(call)                                                          \
  do {                                                                                    \
    const int hpctrain_mpi_rc_ = (call);                                                  \
    if (hpctrain_mpi_rc_ != MPI_SUCCESS)                                                  \
      throw ::hpctrain::Error(std::string(#call) + " failed: " +                          \
                                  ::hpctrain::mpi_error_string(hpctrain_mpi_rc_),         \
                              __FILE__, __LINE__);                                        \
  } while (0)
