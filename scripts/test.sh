#!/usr/bin/env bash
# The README's test command: on a fresh Debian 12 machine installs every dependency, builds
# hpctrain and runs the whole test suite (unit, MPI at 1..4 ranks, I/O, ...).
# Extra arguments go to ctest, e.g. `scripts/test.sh -L unit` or `-R allreduce`.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh"
# Open MPI refuses to run as root unless told; tests run more ranks than this machine has cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
ctest --test-dir "${HPCTRAIN_BUILD_DIR:-$root/build}" --output-on-failure --timeout 900 "$@"
