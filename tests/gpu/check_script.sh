#!/usr/bin/env bash
# ctest driver for scripts/gpu-check.sh (issue 23, docs/gpu.md).
#
#   check_script.sh refuses SOURCE_DIR WORK_DIR     without a GPU the check stops at its first step:
#                                                   exit 3, gpu-check.json holds the failed
#                                                   `machine` record naming nvidia-smi (skips, 77,
#                                                   where nvidia-smi exists)
#   check_script.sh rehearsal SOURCE_DIR WORK_DIR   --host-rehearsal end to end: exit 0 and the
#                                                   records every step must write
set -euo pipefail
mode=$1 src=$2 work=$3
rm -rf "$work/out"
mkdir -p "$work/out"
case $mode in
  refuses)
    if command -v nvidia-smi >/dev/null 2>&1; then echo "nvidia-smi is here: this machine may have a GPU"; exit 77; fi
    set +e
    "$src/scripts/gpu-check.sh" "$work/out" --work "$work/tree"
    rc=$?
    set -e
    [[ $rc -eq 3 ]] || { echo "FAIL: exit $rc, expected 3 (the machine lacks a GPU)"; exit 1; }
    python3 - "$work/out/gpu-check.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert [x["name"] for x in r] == ["machine"], r
assert r[0]["passed"] is False and "nvidia-smi" in r[0]["detail"], r[0]
print("refused as expected:", r[0]["detail"][:120])
PY
    grep -q "MISSING: nvidia-smi" "$work/out/gpu-check.log" || { echo "FAIL: the log does not say what is missing"; exit 1; }
    ;;
  rehearsal)
    "$src/scripts/gpu-check.sh" "$work/out" --work "$work/tree" --jobs "${HPCTRAIN_JOBS:-2}" --host-rehearsal
    python3 - "$work/out/gpu-check.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
names = {x["name"]: x for x in r}
need = ["machine", "build.kokkos", "build.hpctrain", "tests.ctest", "environment", "gemm.correct",
        "train.mlp", "train.cnn", "allreduce.device.p2", "allreduce.device.p4"]
missing = [n for n in need if n not in names]
assert not missing, "records missing: %s" % missing
bad = [n for n, x in names.items() if x.get("passed") is False]
assert not bad, "failed records: %s" % bad
assert names["tests.ctest"]["passed"] is True, names["tests.ctest"]
for n in ("train.mlp", "train.cnn"):
    f = names[n]["figures"]
    assert f["samples_per_s"] > 0 and f["loss_last5"] < f["loss_first5"], names[n]
assert names["allreduce.device.p4"]["figures"]["max_abs_error"] == 0.0
print("rehearsal records:", ", ".join(sorted(names)))
PY
    ;;
  *) echo "usage: $0 refuses|rehearsal SOURCE_DIR WORK_DIR" >&2; exit 2 ;;
esac
