#!/usr/bin/env bash
# check_install.sh BUILD_DIR SOURCE_DIR MPIEXEC: installs the build into a fresh prefix, builds
# examples/ and tests/install/downstream against it with find_package(hpctrain) and runs both
# on 2 ranks. The example runs first: with `set -e` its failure ends the script before the
# downstream line the test's PASS_REGULAR_EXPRESSION looks for.
set -euo pipefail
build=$1 source=$2 mpiexec=$3
work=$(mktemp -d /tmp/hpctrain-install-XXXXXX)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
test -f "$work/prefix/lib/cmake/hpctrain/hpctrainConfig.cmake"
test -x "$work/prefix/bin/hpctrain"
cmake -S "$source/examples" -B "$work/examples" -DCMAKE_PREFIX_PATH="$work/prefix" \
      -DCMAKE_BUILD_TYPE=Release > "$work/examples-configure.log"
cmake --build "$work/examples" -j 2 > "$work/examples-build.log"
HPCTRAIN_DATA_DIR="$work/data" "$mpiexec" -n 2 --oversubscribe "$work/examples/data_parallel_mlp" "$work/checkpoints"
cmake -S "$source/tests/install/downstream" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" \
      -DCMAKE_BUILD_TYPE=Release > "$work/configure.log"
cmake --build "$work/build" -j 2 > "$work/build.log"
"$mpiexec" -n 2 --oversubscribe "$work/build/downstream"
