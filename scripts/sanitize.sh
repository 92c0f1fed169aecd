#!/usr/bin/env bash
# Checking builds with clang's sanitizers and libFuzzer (docs/testing.md). ctest runs it from
# tests/sanitize and tests/fuzz (labels `sanitize`, `fuzz`); by hand:
#
#   scripts/sanitize.sh build asan DIR     configure + build DIR with clang, ASan + UBSan +
#                                          libFuzzer coverage: the chosen tests and the fuzzers
#   scripts/sanitize.sh test asan DIR      run the chosen unit tests and np 2 MPI tests there
#   scripts/sanitize.sh build tsan DIR     the same with TSan: the loopback collectives tests
#   scripts/sanitize.sh test tsan DIR
#   scripts/sanitize.sh fuzz DIR NAME S    run DIR/bin/fuzz_NAME for S seconds from the seed
#                                          corpus tests/fuzz/corpus/NAME (0 crashes to pass)
#
# Only the targets the checks need are built (the whole tree under ASan would not fit CI's
# budget on 2 cores). Sanitizer options and suppressions: tests/sanitize/*.supp, each entry
# with its reason. HPCTRAIN_BUILD_JOBS caps the build's parallelism (default: nproc);
# HPCTRAIN_SANITIZE_DEBUG_FLAGS replaces -gline-tables-only (e.g. -g to debug a finding in gdb).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
action=${1:?usage: sanitize.sh build|test asan|tsan DIR, or sanitize.sh fuzz DIR NAME SECONDS}
jobs=${HPCTRAIN_BUILD_JOBS:-$(nproc)}
supp=$root/tests/sanitize

# What each checking build runs (test_collectives_loopback through loopback_filter).
# Collectives, io, the compute kernels and layers (core, models), classical ML and the trainer's
# np 2 tests (data parallel, ZeRO, checkpoints).
asan_unit=(test_collectives_loopback test_collectives_tuning test_reproducible_loopback test_tree_sum_loopback
  io_unit_tests test_core test_models ml_unit_tests)
asan_mpi2=(test_collectives_mpi test_reproducible_mpi test_tree_sum_mpi io_mpi_tests test_train_mpi test_zero_mpi
  test_data_parallel_mpi test_checkpoint_mpi)
# fuzz_config links the CLI's option mapping (core, models and train, which the tests above
# build under ASan anyway).
fuzzers=(fuzz_idx fuzz_manifest fuzz_tuning fuzz_config)
# TSan: the loopback collectives (ranks are threads of one process) and the progress engine
# (iallreduce / ireduce_scatter / iallgather run on the communicator's progress thread). The
# 1..16-rank matrix is trimmed to 2 and 3 ranks (every algorithm and variant), plus the
# non-blocking, barrier, split and timeout tests whole: a sanitizer's slowdown times 16 threads on
# 2 cores took over 10 minutes for the whole binary under ASan.
# TSan keeps 2 ranks (every algorithm and variant, threads racing on every shared path); the
# 3-rank cases (non-power-of-two branches) run under ASan and in the ordinary build (they take
# 25 of the filtered binary's 44 s uninstrumented, so about half of TSan's 4 minutes).
tsan_unit=(test_collectives_loopback test_reproducible_loopback test_tree_sum_loopback)
tsan_loopback_filter='*_p2:LoopbackCollectives.*:HalfPrecision.*'
# The tree sum under TSan: the exchange and the lent-term and bound cases (1..5 ranks), and the
# sum finished in segments while the progress thread adds earlier ones (about 10 s under TSan);
# the any-split matrix (8 ranks, 9,001-float terms) runs under ASan.
tsan_tree_sum_filter='Exchange.*:TreeSum.ResultMayBeALentTerm:TreeSum.WithinPairwiseBoundOfFloat64:TreeSum.Refuses*:TreeSum.SegmentsFinishWithTheWholeSumsBits:TreeSum.TwoRanksWithOneNodeEachFinishWithTheTreesBits'
# ASan: the allreduce matrix at 2 and 3 ranks and the 1 Mi + 3 element cases (LoopbackLarge) at
# 3 ranks only, which were 68 of the binary's 71 s under ASan. Their 2-rank form is covered
# twice: under ASan by test_collectives_mpi at np 2 (every algorithm at 1 Mi + 3 elements, every
# type and op) and under TSan by the same LoopbackLarge *_p2 cases. The 3-rank large cases run
# in a second pass without detect_stack_use_after_return (40% of their CPU time): their stack
# frames are the small cases' frames, which the first pass checks with it on, as does the np 2
# MPI matrix at 1 Mi + 3 elements.
asan_loopback_filter='*LoopbackAllreduce.*_p2:*LoopbackAllreduce.*_p3:LoopbackCollectives.*:HalfPrecision.*'
asan_loopback_large_filter='*LoopbackLarge.*_p3'

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# halt_on_error + -fno-sanitize-recover: the first finding fails the run with a non-zero exit.
export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:detect_leaks=1:detect_stack_use_after_return=1:strict_string_checks=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$supp/lsan.supp:print_suppressions=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:suppressions=$supp/tsan.supp}

configure_and_build() {
  local kind=$1 dir=$2 sanitize targets=()
  shift 2
  case $kind in
    asan) sanitize="address;undefined"; targets=("${asan_unit[@]}" "${asan_mpi2[@]}" "${fuzzers[@]}") ;;
    tsan) sanitize=thread; targets=("${tsan_unit[@]}") ;;
    *) echo "sanitize.sh: unknown build '$kind' (asan or tsan)" >&2; exit 2 ;;
  esac
  local fuzz=OFF
  [[ $kind == asan ]] && fuzz=ON
  targets+=("$@")  # extra targets given after DIR
  # -O1: a quarter less compile time than -O2 and exact stack traces; -gline-tables-only: the
  # reports keep function, file and line (no variables or types, which sanitizer reports never
  # print) for less compile and link time than -g; UCX off (the UCX matrix is not in the chosen
  # subset); no benchmarks, no nested checking builds.
  local flags="-O1 ${HPCTRAIN_SANITIZE_DEBUG_FLAGS:--gline-tables-only}"
  local target_list  # one CMake list (HPCTRAIN_CHECK_TARGETS)
  target_list=$(IFS=';'; echo "${targets[*]}")
  # Ninja when it is installed (Debian ninja-build; optional): unlike make it compiles a test's
  # objects while the libraries it links are still compiling. An existing DIR keeps its generator.
  local generator=()
  if [[ ! -f $dir/CMakeCache.txt ]] && command -v ninja > /dev/null; then generator=(-G Ninja); fi
  CC=clang CXX=clang++ cmake -S "$root" -B "$dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="$flags" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$flags" \
    -DHPCTRAIN_SANITIZE="$sanitize" -DHPCTRAIN_FUZZ=$fuzz -DHPCTRAIN_ENABLE_UCX=OFF \
    -DHPCTRAIN_ENABLE_BENCHMARKS=OFF -DHPCTRAIN_TEST_KOKKOS_OPENMP=OFF -DHPCTRAIN_ENABLE_OPENMP=OFF \
    -DHPCTRAIN_CHECK_TARGETS="$target_list" > "$dir.configure.log" \
    || { cat "$dir.configure.log"; exit 1; }
  # One target over all of them (cmake/HpctrainSanitize.cmake): make schedules every object of
  # every target at once instead of one target after another.
  # HPCTRAIN_SANITIZE_MAKE_ARGS: extra build-tool arguments, e.g. -k (make) or -k 0 (ninja) to
  # see every error at once.
  cmake --build "$dir" -j "$jobs" --target hpctrain_check_set -- ${HPCTRAIN_SANITIZE_MAKE_ARGS:-}
}

run_tests() {
  local kind=$1 dir=$2 failed=() t
  local -a unit mpi2 filter
  case $kind in
    asan) unit=("${asan_unit[@]}"); mpi2=("${asan_mpi2[@]}") ;;
    tsan) unit=("${tsan_unit[@]}"); mpi2=() ;;
    *) echo "sanitize.sh: unknown build '$kind'" >&2; exit 2 ;;
  esac
  # gtest_discover_tests would need the binaries at configure time of the parent; the
  # binaries are run directly instead, each as one check.
  cd "$dir"
  for t in "${unit[@]}"; do
    echo "== $kind: $t"
    filter=()
    if [[ $t == test_collectives_loopback ]]; then
      if [[ $kind == tsan ]]; then filter=(--gtest_filter="$tsan_loopback_filter"); else filter=(--gtest_filter="$asan_loopback_filter"); fi
    fi
    if [[ $t == test_tree_sum_loopback && $kind == tsan ]]; then filter=(--gtest_filter="$tsan_tree_sum_filter"); fi
    if ! "bin/$t" "${filter[@]}" --gtest_brief=1; then failed+=("$t"); fi
    if [[ $t == test_collectives_loopback && $kind == asan ]]; then
      echo "== $kind: $t ($asan_loopback_large_filter, detect_stack_use_after_return=0)"
      if ! ASAN_OPTIONS="$ASAN_OPTIONS:detect_stack_use_after_return=0" \
          "bin/$t" --gtest_filter="$asan_loopback_large_filter" --gtest_brief=1; then
        failed+=("$t.large")
      fi
    fi
  done
  # LeakSanitizer is off for MPI ranks: Open MPI's components are dlopen'ed and unloaded by
  # MPI_Finalize, so their leftovers are reported from "<unknown module>" with stacks cut at the
  # first uninstrumented frame, which no suppression by library name can match (lsan.supp).
  for t in "${mpi2[@]}"; do
    echo "== $kind: mpiexec -n 2 $t"
    if ! ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0" mpiexec -n 2 --oversubscribe -x ASAN_OPTIONS \
        "bin/$t" --gtest_brief=1; then
      failed+=("$t.np2")
    fi
  done
  if ((${#failed[@]})); then
    echo "sanitize.sh: $kind FAILED: ${failed[*]}"
    exit 1
  fi
  echo "sanitize.sh: $kind: ${#unit[@]} unit and ${#mpi2[@]} np 2 test binaries clean"
}

run_fuzzer() {
  local dir=$1 name=$2 seconds=$3
  local seeds=$root/tests/fuzz/corpus/$name work=$dir/fuzz-work/$name
  rm -rf "$work"
  mkdir -p "$work/corpus"
  # New inputs go to the scratch corpus (first directory); the committed seeds are read only.
  # -rss_limit_mb / -malloc_limit_mb: an input that makes a parser allocate > 1 GiB is a finding.
  cd "$work"
  "$dir/bin/fuzz_$name" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -malloc_limit_mb=1024 -print_final_stats=1 -artifact_prefix="$work/" \
    "$work/corpus" "$seeds"
}

case $action in
  build) configure_and_build "${2:?kind}" "${3:?build dir}" "${@:4}" ;;
  test) run_tests "${2:?kind}" "${3:?build dir}" ;;
  fuzz) run_fuzzer "${2:?build dir}" "${3:?fuzzer name}" "${4:?seconds}" ;;
  *) echo "sanitize.sh: unknown action '$action'" >&2; exit 2 ;;
esac
