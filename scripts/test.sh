#!/usr/bin/env bash
# The README's test command: on a fresh Debian 12 machine installs every dependency, builds
# hpctrain and runs a test set through ctest.
#
#   scripts/test.sh            the CI set (25-29 min of tests on 2 cores, plus about 7 min to build): every test
#                              not labelled `long`, as many at a time as the machine has cores
#                              (HPCTRAIN_TEST_JOBS overrides; ctest keeps each MPI test's ranks on cores
#                              of their own through its PROCESSORS property)
#   scripts/test.sh --all      every test, `long` ones included
#
# The CI set includes the clang sanitizer builds and the fuzzers (labels `sanitize`, `fuzz`;
# docs/testing.md). A check that takes minutes on its own carries the ctest label `long` and states its minutes
# in a comment next to its add_test. Other arguments go to ctest, e.g. `scripts/test.sh -L unit`
# or `scripts/test.sh --all -R allreduce`.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
label_set=(-LE long)
ctest_args=()
for arg in "$@"; do
  if [[ $arg == --all ]]; then
    label_set=()
  else
    ctest_args+=("$arg")
  fi
done
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh"
"$root/scripts/python-tools.sh"  # pinned PyPI readers the tests use (tensorboard)
# Open MPI refuses to run as root unless told; tests run more ranks than this machine has cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
ctest --test-dir "${HPCTRAIN_BUILD_DIR:-$root/build}" --output-on-failure --timeout 900 \
  --parallel "${HPCTRAIN_TEST_JOBS:-$(nproc)}" \
  "${label_set[@]+"${label_set[@]}"}" "${ctest_args[@]+"${ctest_args[@]}"}"
