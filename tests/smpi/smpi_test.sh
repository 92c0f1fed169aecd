#!/usr/bin/env bash
# ctest's SMPI checks (tests/smpi/CMakeLists.txt, docs/simulation.md):
#
#   smpi_test.sh build DIR    scripts/smpi-build.sh DIR (the fixture)
#   smpi_test.sh run DIR      smpi_allreduce --check at 64 ranks (every method, 5 sizes) and 48
#                             ranks (a non-power of two) on the 100 Gb/s fat-tree; passes when
#                             every method that runs under SMPI gives the exact sums at every
#                             size and shm, hierarchical and nonblocking are refused with a
#                             message naming SMPI. Simulated times go to DIR/smpi-test-p<P>.txt.
#
# Without SimGrid (no smpicxx/smpirun) it skips (exit 77) with the reason, except under CI
# (CI=true), where a missing SimGrid fails.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
action=${1:?usage: smpi_test.sh build|run DIR}
dir=${2:?usage: smpi_test.sh build|run DIR}

if ! command -v smpicxx > /dev/null || ! command -v smpirun > /dev/null; then
  msg="SimGrid's smpicxx/smpirun not found (Debian: apt-get install libsimgrid-dev; Spack: simgrid; scripts/install-deps.sh installs it)"
  if [[ ${CI:-} == true ]]; then
    echo "smpi_test.sh: FAIL under CI: $msg" >&2
    exit 1
  fi
  echo "smpi_test.sh: SKIP: $msg" >&2
  exit 77
fi

if [[ $action == build ]]; then
  exec "$root/scripts/smpi-build.sh" "$dir"
fi
[[ $action == run ]] || { echo "smpi_test.sh: unknown action '$action'" >&2; exit 2; }

driver=$dir/bin/smpi_allreduce
[[ -x $driver ]] || { echo "smpi_test.sh: $driver missing: the smpi.build fixture failed" >&2; exit 1; }
platform=$root/benchmarks/smpi/fat-tree-100g.xml
# The study's SMPI settings (scripts/simulate-collectives, docs/simulation.md).
cfg=(--cfg=smpi/simulate-computation:no --cfg=smpi/host-speed:1Gf --cfg=smpi/test:1e-7
     --cfg=smpi/grow-injected-times:no --cfg=smpi/bw-factor:0:1 --cfg=smpi/lat-factor:0:1
     --cfg=smpi/coll-selector:ompi --log=root.thr:warning)

methods_ok=(ring tree recursive_doubling rabenseifner auto mpi reproducible)
methods_refused=(shm hierarchical nonblocking)
all=$(IFS=,; echo "${methods_ok[*]},${methods_refused[*]}")
failures=0

check_run() {  # ranks, sizes (bytes, comma-separated)
  local p=$1 sizes=$2 hosts=$dir/smpi-test-hosts-$1 out=$dir/smpi-test-p$1.txt rc=0
  for ((i = 0; i < p; ++i)); do echo "node-$i"; done > "$hosts"
  smpirun -np "$p" -platform "$platform" -hostfile "$hosts" "$driver" "${cfg[@]}" \
    --algorithms="$all" --sizes="$sizes" --iters=1 --check > "$out" 2> "$out.stderr" || rc=$?
  echo "--- P=$p (simulated times; exit $rc)"
  grep -E '^(result|unsupported) ' "$out" || true
  for m in "${methods_ok[@]}"; do
    for b in ${sizes//,/ }; do
      if ! grep -qE "^result algo=$m ranks=$p bytes=$b .*check=ok( |$)" "$out"; then
        echo "FAIL: $m at P=$p, $b bytes: no correct result ($(grep -E "algo=$m ranks=$p bytes=$b |algo=$m ranks=$p reason" "$out" || echo 'no line'))"
        failures=$((failures + 1))
      fi
    done
  done
  for m in "${methods_refused[@]}"; do
    if ! grep -qE "^unsupported algo=$m ranks=$p reason=.*SMPI" "$out"; then
      echo "FAIL: $m at P=$p was not refused with a message naming SMPI ($(grep -E "algo=$m " "$out" | head -2 || echo 'no line'))"
      failures=$((failures + 1))
    fi
  done
  if [[ $rc != 0 ]] && ! grep -q . "$out"; then
    echo "FAIL: smpirun exit $rc:"; tail -20 "$out.stderr"; failures=$((failures + 1))
  fi
}

# Sizes as in the collectives matrix: 1, 7, P-1 and 16 Ki + 3 int32 elements, and 256 Ki + 3
# (1 MiB + 12 B: several ring and Rabenseifner segments, the double binary tree's pipeline).
check_run 64 4,28,252,65548,1048588
check_run 48 4,188,65548
if ((failures > 0)); then
  echo "smpi_test.sh: $failures failure(s)"
  exit 1
fi
echo "smpi_test.sh: all methods correct or refused with a clear message"
