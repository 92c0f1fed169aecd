#!/usr/bin/env bash
# Configures and builds hpctrain into ${HPCTRAIN_BUILD_DIR:-build} (Release with debug info).
# Extra arguments go to the CMake configure step, e.g. -DHPCTRAIN_ENABLE_UCX=OFF.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${HPCTRAIN_BUILD_DIR:-$root/build}
jobs=${HPCTRAIN_BUILD_JOBS:-$(nproc)}
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
cmake --build "$build" -j "$jobs"
