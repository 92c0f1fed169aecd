#pragma once
/// @file
/// Compatibility: the error type moved to hpctrain::base (`hpctrain/base/error.hpp`, with the
/// MPI check in `hpctrain/base/mpi_error.hpp`). This header lives in the base library, so code
/// that links only hpctrain::base (core, models) still finds it. New code includes the base
/// headers.

#include "hpctrain/base/error.hpp"
