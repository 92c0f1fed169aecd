#!/usr/bin/env bash
# Kokkos portability check beyond Serial: runs the compute-core and model tests on a Kokkos
# whose default execution space is OpenMP, with 2 threads, so races in parallel kernels show.
#
#   scripts/kokkos-openmp/build.sh BUILD_ROOT [--no-tests]
#
# Debian's Kokkos is Serial only, so this builds its own, from the Kokkos 3.4.01 source that
# Debian ships inside its `trilinos` source package (same version as libtrilinos-kokkos-dev):
#
#   BUILD_ROOT/cache/src/{kokkos,kokkos-kernels}  sources (private apt config; kokkos-lib.sh)
#   BUILD_ROOT/kokkos-install                     Kokkos (OpenMP + Serial, static)
#   BUILD_ROOT/kokkos-kernels-install             Kokkos Kernels, BLAS component only, no ETI,
#                                                 BLAS TPL = OpenBLAS: KokkosBlas::gemm on float
#                                                 and double goes to sgemm/dgemm, and the few
#                                                 kernels we use are instantiated in our code
#   BUILD_ROOT/hpctrain-openmp                    hpctrain configured against them; only the
#                                                 test_core, test_core_environment and
#                                                 test_models targets are built
#
# Every stage is cached: an install is reused when its stamp (the options it was built with)
# matches, so a second run only rebuilds what hpctrain changed and reruns the tests.
# Registered with ctest as kokkos_openmp (tests/kokkos_openmp, labels kokkos-openmp;slow).
#
# Environment: HPCTRAIN_JOBS (default 2) parallel build jobs; HPCTRAIN_OMP_THREADS (default 2);
# HPCTRAIN_TEST_REPEAT (default 3) runs of each test suite.
set -euo pipefail

usage() { echo "usage: $0 BUILD_ROOT [--no-tests]" >&2; exit 2; }
[[ $# -ge 1 ]] || usage
run_tests=1
root=$1
shift
for arg in "$@"; do
  case $arg in
    --no-tests) run_tests=0 ;;
    *) usage ;;
  esac
done

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
source_dir=$(cd "$here/../.." && pwd)
mkdir -p "$root"
root=$(cd "$root" && pwd)
threads=${HPCTRAIN_OMP_THREADS:-2}
repeat=${HPCTRAIN_TEST_REPEAT:-3}   # races are timing-dependent: run each suite a few times
export KOKKOS_JOBS=${HPCTRAIN_JOBS:-2} KOKKOS_LOG_DIR=$root KOKKOS_LOG_TAG=kokkos-openmp
# shellcheck source=kokkos-lib.sh
source "$here/kokkos-lib.sh"
log() { kokkos_log "$@"; }
run_logged() { kokkos_run_logged "$@" || exit 1; }

# ---- 1. sources ---------------------------------------------------------------------------
kokkos_source_fetch "$root/cache"
log "sources: $root/cache/src (Kokkos $KOKKOS_SOURCE_VERSION)"

# ---- 2. Kokkos: OpenMP + Serial, static, C++17 (OpenMP is then the default space) --------
kokkos_prefix=$root/kokkos-install
kokkos_cmake_install kokkos "$root/cache/src/kokkos" "$kokkos_prefix" \
  -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER="${CXX:-c++}" \
  -DCMAKE_CXX_STANDARD=17 -DCMAKE_CXX_EXTENSIONS=OFF \
  -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DBUILD_SHARED_LIBS=OFF \
  -DKokkos_ENABLE_OPENMP=ON -DKokkos_ENABLE_SERIAL=ON \
  -DKokkos_ENABLE_TESTS=OFF -DKokkos_ENABLE_EXAMPLES=OFF

# ---- 3. Kokkos Kernels: BLAS only, no pre-instantiations, OpenBLAS as the BLAS TPL ------
kk_prefix=$root/kokkos-kernels-install
blas_dir=$(kokkos_openblas_dir)
mapfile -t kk_args < <(kokkos_kernels_minimal_args "$blas_dir")
kokkos_cmake_install kokkos-kernels "$root/cache/src/kokkos-kernels" "$kk_prefix" \
  -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER="${CXX:-c++}" \
  -DCMAKE_CXX_STANDARD=17 -DCMAKE_CXX_EXTENSIONS=OFF \
  -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DBUILD_SHARED_LIBS=OFF \
  -DKokkos_ROOT="$kokkos_prefix" "${kk_args[@]}"

# ---- 4. the backend really is OpenMP --------------------------------------------------------
# A tiny program built against the same install prints hpctrain::core::ExecSpace (our alias of
# Kokkos::DefaultExecutionSpace) and its concurrency, and fails unless they are OpenMP and
# the requested thread count.
check_build=$root/backend-check
run_logged "$root/backend-check-configure.log" cmake -S "$here/backend-check" -B "$check_build" \
  -DCMAKE_BUILD_TYPE=Release -DKokkos_ROOT="$kokkos_prefix" \
  -DHPCTRAIN_CORE_INCLUDE_DIR="$source_dir/src/core/include"
run_logged "$root/backend-check-build.log" cmake --build "$check_build" -j "$KOKKOS_JOBS"
export OMP_NUM_THREADS=$threads OMP_PROC_BIND=false
"$check_build/kokkos_backend_check" --expect-space=OpenMP --expect-concurrency="$threads" \
  --kokkos-threads="$threads"

# ---- 5. hpctrain against this Kokkos ------------------------------------------------------
hp=$root/hpctrain-openmp
log "hpctrain: configuring $hp"
run_logged "$root/hpctrain-configure.log" cmake -S "$source_dir" -B "$hp" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DKokkos_ROOT="$kokkos_prefix" -DKokkosKernels_ROOT="$kk_prefix" \
  -DHPCTRAIN_ENABLE_TESTS=ON -DHPCTRAIN_ENABLE_BENCHMARKS=OFF -DHPCTRAIN_ENABLE_UCX=OFF \
  -DHPCTRAIN_WARNINGS_AS_ERRORS=OFF -DHPCTRAIN_KOKKOS_OPENMP_CHILD=ON
# The build must use this Kokkos, not Debian's Serial one in /usr.
kokkos_dir=$(sed -n 's/^Kokkos_DIR:[A-Z]*=//p' "$hp/CMakeCache.txt")
case $kokkos_dir in
  "$kokkos_prefix"/*) log "hpctrain: Kokkos_DIR=$kokkos_dir" ;;
  *) echo "kokkos-openmp: hpctrain picked Kokkos_DIR=$kokkos_dir, not $kokkos_prefix" >&2; exit 1 ;;
esac
grep -q "using Kokkos::kokkos and Kokkos::kokkoskernels targets" "$root/hpctrain-configure.log" ||
  { echo "kokkos-openmp: cmake/HpctrainKokkos.cmake did not take the standard targets" >&2; exit 1; }

targets=(test_core test_core_environment test_models)
log "hpctrain: building ${targets[*]}"
run_logged "$root/hpctrain-build.log" cmake --build "$hp" -j "$KOKKOS_JOBS" --target "${targets[@]}"

# ---- 6. the tests, 2 OpenMP threads ---------------------------------------------------------
if ((run_tests)); then
  failed=()
  for t in "${targets[@]}"; do
    # MPI cannot be initialised twice in a process: the Environment test runs once.
    n=$repeat
    [[ $t == test_core_environment ]] && n=1
    log "running $t (OMP_NUM_THREADS=$threads, $n times)"
    if ! "$hp/bin/$t" --gtest_brief=1 --gtest_repeat="$n" --kokkos-threads="$threads"; then
      failed+=("$t")
    fi
  done
  if ((${#failed[@]})); then
    echo "kokkos-openmp: FAILED on the OpenMP backend: ${failed[*]}" >&2
    exit 1
  fi
  log "all compute-core and model tests pass on OpenMP with $threads threads"
fi
