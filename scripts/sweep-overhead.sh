#!/usr/bin/env bash
# The sweep's overhead: N trials through `hpctrain sweep` (one group of all P ranks,
# --scheduler none) against the same N trainings run back to back as separate
# `mpirun -n P hpctrain train` jobs with the same options (the trials' parameters read from the
# sweep's results.jsonl, and the per-epoch checkpoints the sweep writes). Alternates the two
# REPEATS times and prints each wall time and the median ratio sweep / back-to-back.
#
#   scripts/sweep-overhead.sh [N_TRIALS=4] [EPOCHS=2] [RANKS=2] [REPEATS=3]
#
# Data: Fashion-MNIST (imported into $HPCTRAIN_DATA_DIR, default build/data, on first use).
# Run it on a quiet machine (docs/sweeps.md gives the protocol and the figures measured).
set -euo pipefail
# Open MPI refuses to run as root unless told (these machines run as root).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${HPCTRAIN_BUILD_DIR:-$root/build}
hpctrain=$build/bin/hpctrain
n=${1:-4} epochs=${2:-2} ranks=${3:-2} repeats=${4:-3}
work=$(mktemp -d "${TMPDIR:-/tmp}/sweep-overhead.XXXXXX")
trap 'rm -rf "$work"' EXIT
export HPCTRAIN_DATA_DIR=${HPCTRAIN_DATA_DIR:-$build/data}
mpirun=(mpirun -n "$ranks" --oversubscribe)
cat > "$work/space.json" <<JSON
{"base": {"epochs": $epochs, "global-batch": 128, "log-every": 0},
 "search": {"lr": {"loguniform": [0.01, 0.1]}, "momentum": {"choice": [0.8, 0.9]}}, "seed": 1}
JSON
now() { date +%s.%N; }
run_sweep() {
  rm -rf "$work/sweep"
  "${mpirun[@]}" "$hpctrain" sweep --space "$work/space.json" --ranks-per-trial "$ranks" --max-trials "$n" \
    --out "$work/sweep" --quiet
}
run_back_to_back() {
  local steps
  steps=$(( 60000 / 128 ))  # one checkpoint per epoch, as the sweep writes (Fashion-MNIST, drop-last)
  /usr/bin/python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
for r in map(json.loads, open(f"{work}/sweep/results.jsonl")):
    json.dump(r["params"], open(f"{work}/trial-{r['trial']}.json", "w"))
PY
  for cfg in "$work"/trial-*.json; do
    rm -rf "$work/ckpt"
    "${mpirun[@]}" "$hpctrain" train --config "$cfg" --epochs "$epochs" --global-batch 128 --log-every 0 \
      --metrics "$work/m.jsonl" --checkpoint-dir "$work/ckpt" --checkpoint-every "$steps" --keep $((epochs + 1)) \
      --quiet
  done
}
run_sweep  # warm-up (imports the data on the first run) and the trial list
echo "sweep-overhead: $n trials x $epochs epochs at $ranks ranks, load $(cut -d' ' -f1-3 /proc/loadavg)"
ratios=()
for ((i = 1; i <= repeats; i++)); do
  t0=$(now); run_sweep; t1=$(now); run_back_to_back; t2=$(now)
  s=$(awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}'); b=$(awk -v a="$t1" -v b="$t2" 'BEGIN {print b - a}')
  ratios+=("$(awk -v s="$s" -v b="$b" 'BEGIN {print s / b}')")
  printf 'sweep-overhead: run %d: sweep %.2f s, back to back %.2f s, ratio %.3f\n' "$i" "$s" "$b" "${ratios[-1]}"
done
median=$(printf '%s\n' "${ratios[@]}" | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}')
printf 'sweep-overhead: median ratio sweep / back-to-back %.3f (load after: %s)\n' "$median" "$(cut -d' ' -f1-3 /proc/loadavg)"
