#pragma once
/// @file
/// The few places where Kokkos 3.4 (Debian) and Kokkos 4.x spell things differently.
///
/// * Math functions usable inside kernels: `Kokkos::Experimental::exp` up to 3.6,
///   `Kokkos::exp` from 3.7 on (the Experimental names are gone in 4.x without deprecated code).
/// * `Kokkos::ALL` is an object in both generations (3.4 also accepts `Kokkos::ALL()`); we write
///   `Kokkos::ALL` everywhere, which needs no shim.
/// * `Kokkos::is_finalized()` appeared in 3.7; hpctrain::Environment keeps its own flag instead.

#include <Kokkos_Core.hpp>

namespace hpctrain::core::kmath {

#if KOKKOS_VERSION >= 30700
using Kokkos::cos;
using Kokkos::exp;
using Kokkos::fabs;
using Kokkos::log;
using Kokkos::sqrt;
using Kokkos::tanh;
#else
using Kokkos::Experimental::cos;
using Kokkos::Experimental::exp;
using Kokkos::Experimental::fabs;
using Kokkos::Experimental::log;
using Kokkos::Experimental::sqrt;
using Kokkos::Experimental::tanh;
#endif

}  // namespace hpctrain::core::kmath
