#!/usr/bin/env bash
# check_install.sh BUILD_DIR SOURCE_DIR MPIEXEC: installs the build into a fresh prefix, builds
# tests/install/downstream against it with find_package(hpctrain) and runs it on 2 ranks.
set -euo pipefail
build=$1 source=$2 mpiexec=$3
work=$(mktemp -d /tmp/hpctrain-install-XXXXXX)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
test -f "$work/prefix/lib/cmake/hpctrain/hpctrainConfig.cmake"
test -x "$work/prefix/bin/hpctrain"
cmake -S "$source/tests/install/downstream" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" \
      -DCMAKE_BUILD_TYPE=Release > "$work/configure.log"
cmake --build "$work/build" -j 2 > "$work/build.log"
"$mpiexec" -n 2 --oversubscribe "$work/build/downstream"
