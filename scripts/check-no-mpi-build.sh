#!/usr/bin/env bash
# hpctrain without MPI (issue 23, docs/testing.md "Building without MPI"): configures DIR with
# HPCTRAIN_ENABLE_MPI=OFF while CMake may not find MPI, HDF5, oneDNN, UCX or Google Benchmark
# (CMAKE_DISABLE_FIND_PACKAGE_*; as on a GPU node), builds base, the loopback collectives, core,
# models and their unit tests, checks that no binary links MPI, HDF5, UCX or oneDNN (ldd), and
# runs the tests (not `long`).
#
#   scripts/check-no-mpi-build.sh DIR
#
# GoogleTest comes from a source tree when HPCTRAIN_GTEST_SOURCE_DIR is set or Debian's
# /usr/src/googletest exists (a machine without an installed GoogleTest), else find_package.
# HPCTRAIN_NLOHMANN_JSON_INCLUDE_DIR, when set, is passed on (a machine with only json.hpp).
# HPCTRAIN_JOBS: parallel build jobs (default 2). Prints the wall time it took.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir=${1:?usage: check-no-mpi-build.sh DIR}
jobs=${HPCTRAIN_JOBS:-2}
start=$(date +%s)

gtest_src=${HPCTRAIN_GTEST_SOURCE_DIR:-}
if [[ -z $gtest_src && -f /usr/src/googletest/CMakeLists.txt ]]; then gtest_src=/usr/src/googletest; fi
args=(-DHPCTRAIN_ENABLE_MPI=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
      -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON -DCMAKE_DISABLE_FIND_PACKAGE_HDF5=ON
      -DCMAKE_DISABLE_FIND_PACKAGE_dnnl=ON -DCMAKE_DISABLE_FIND_PACKAGE_ucx=ON
      -DCMAKE_DISABLE_FIND_PACKAGE_benchmark=ON)
[[ -n $gtest_src ]] && args+=(-DHPCTRAIN_GTEST_SOURCE_DIR="$gtest_src")
[[ -n ${HPCTRAIN_NLOHMANN_JSON_INCLUDE_DIR:-} ]] && args+=(-DHPCTRAIN_NLOHMANN_JSON_INCLUDE_DIR="$HPCTRAIN_NLOHMANN_JSON_INCLUDE_DIR")
[[ -n ${CMAKE_CXX_COMPILER_LAUNCHER:-} ]] && args+=(-DCMAKE_CXX_COMPILER_LAUNCHER="$CMAKE_CXX_COMPILER_LAUNCHER")

cmake -S "$root" -B "$dir" --no-warn-unused-cli "${args[@]}"
nice cmake --build "$dir" -j "$jobs"

linked=0
for bin in "$dir"/bin/*; do
  [[ -x $bin && -f $bin ]] || continue
  if ldd "$bin" | grep -i 'libmpi\|libhdf5\|libucp\|libdnnl'; then
    echo "check-no-mpi-build.sh: $bin links MPI, HDF5, UCX or oneDNN" >&2
    linked=1
  fi
done
[[ $linked == 0 ]] || exit 1

ctest --test-dir "$dir" -LE long -j "$jobs" --output-on-failure
echo "check-no-mpi-build.sh: passed in $(($(date +%s) - start)) s ($(ls "$dir"/bin | wc -l) binaries, none linking MPI)"
