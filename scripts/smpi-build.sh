#!/usr/bin/env bash
# Builds hpctrain::base, hpctrain::collectives and the driver smpi_allreduce with SimGrid's
# smpicxx (docs/simulation.md), from benchmarks/smpi, into DIR (default build/smpi).
#
#   scripts/smpi-build.sh [DIR]
#
# Needs libsimgrid-dev (Debian; Spack: simgrid): smpicxx and smpirun on PATH.
# HPCTRAIN_BUILD_JOBS caps the build's parallelism (default: nproc). ccache is used through
# CMAKE_CXX_COMPILER_LAUNCHER when that is set, as in scripts/build.sh.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir=${1:-$root/build/smpi}
jobs=${HPCTRAIN_BUILD_JOBS:-$(nproc)}
if ! command -v smpicxx > /dev/null || ! command -v smpirun > /dev/null; then
  echo "smpi-build.sh: smpicxx/smpirun not found: install SimGrid (Debian: apt-get install" \
       "libsimgrid-dev; Spack: simgrid), or run scripts/install-deps.sh" >&2
  exit 3
fi
mkdir -p "$dir"
# smpicxx wraps the system C++ compiler; SMPI's privatisation needs position-independent code
# (smpicxx adds what it needs). Release: the simulated ranks run the real reductions.
CXX=smpicxx cmake -S "$root/benchmarks/smpi" -B "$dir" -DCMAKE_BUILD_TYPE=Release \
  ${CMAKE_CXX_COMPILER_LAUNCHER:+-DCMAKE_CXX_COMPILER_LAUNCHER=$CMAKE_CXX_COMPILER_LAUNCHER} \
  > "$dir/configure.log" 2>&1 || { cat "$dir/configure.log" >&2; exit 1; }
cmake --build "$dir" --parallel "$jobs"
echo "smpi-build.sh: built $dir/bin/smpi_allreduce"
