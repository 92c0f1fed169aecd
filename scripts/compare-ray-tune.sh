#!/usr/bin/env bash
# hpctrain sweep vs Ray Tune 2.60 (PyPI) with PyTorch 2.15 trainables: the same search space,
# the same ASHA settings, the same trial budget, on the same cores, measured in one session.
# Prints the wall time until the best test accuracy reaches --target on each side (from the
# sweep's / tuner.fit()'s start, and from the command's launch) and the best accuracy within
# --budget-s seconds. See docs/sweeps.md for the figures measured.
#
#   scripts/compare-ray-tune.sh [--trials 8] [--epochs 4] [--target 0.85] [--budget-s 30]
#                               [--cpus C] [--per-trial K] [--repeats 1] [--draws same|own] [--out DIR]
#
# --draws same (default): Ray evaluates the trial parameters hpctrain's sweep drew, in the same
# order (BasicVariantGenerator's points_to_evaluate), so the two sides run the same trials and
# the time to the target compares the systems, not the luck of 8 random draws. --draws own: Ray
# samples the space with its own random generator (the protocol of the first measurements).
#
# Venvs (created with pip on first use): PyTorch in ${HPCTRAIN_TORCH_VENV:-build/peer-venv}
# (the one scripts/compare-torch.sh makes: torch==2.15.0 h5py numpy; several GB), Ray in
# ${HPCTRAIN_RAY_VENV:-build/ray-venv} (ray[tune]==2.60.0), which sees the torch venv's
# packages through a .pth file. Data: Fashion-MNIST as hpctrain imports it ($HPCTRAIN_DATA_DIR).
# --per-trial K (default 1) gives every trial K of the C cores on both sides: hpctrain runs
# `mpirun -n C hpctrain sweep --ranks-per-trial K` (C/K trials at once, each K ranks of one
# thread, data parallel); Ray runs with num_cpus=C and K CPUs (K torch intra-op threads) per
# trial, C/K trials at once.
set -euo pipefail
# Open MPI refuses to run as root unless told (these machines run as root).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${HPCTRAIN_BUILD_DIR:-$root/build}
trials=8 epochs=4 target=0.85 budget=30 cpus=$(getconf _NPROCESSORS_ONLN) repeats=1 out="" draws=same per_trial=1
while (($#)); do
  case $1 in
    --trials) trials=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    --target) target=$2; shift 2 ;;
    --budget-s) budget=$2; shift 2 ;;
    --cpus) cpus=$2; shift 2 ;;
    --per-trial) per_trial=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --draws) draws=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "compare-ray-tune: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ $draws == same || $draws == own ]] || { echo "compare-ray-tune: --draws must be same or own, got '$draws'" >&2; exit 2; }
[[ $per_trial =~ ^[1-9][0-9]*$ ]] && (( cpus % per_trial == 0 )) ||
  { echo "compare-ray-tune: --per-trial must be a positive divisor of --cpus ($cpus), got '$per_trial'" >&2; exit 2; }
out=${out:-$root/results/compare-ray-tune-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"
export HPCTRAIN_DATA_DIR=${HPCTRAIN_DATA_DIR:-$build/data}
torch_venv=${HPCTRAIN_TORCH_VENV:-$build/peer-venv}
ray_venv=${HPCTRAIN_RAY_VENV:-$build/ray-venv}
if ! "$torch_venv/bin/python" -c "import torch, h5py, numpy" 2> /dev/null; then
  echo "compare-ray-tune: installing torch==2.15.0 h5py numpy into $torch_venv (once; several GB)" >&2
  /usr/bin/python3 -m venv "$torch_venv"
  "$torch_venv/bin/pip" install --quiet --disable-pip-version-check torch==2.15.0 h5py numpy
fi
if ! "$ray_venv/bin/python" -c "import ray.tune, torch" 2> /dev/null; then
  echo "compare-ray-tune: installing ray[tune]==2.60.0 into $ray_venv (once)" >&2
  /usr/bin/python3 -m venv "$ray_venv"
  site=$("$torch_venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  echo "$site" > "$("$ray_venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/torch-venv.pth"
  "$ray_venv/bin/pip" install --quiet --disable-pip-version-check "ray[tune]==2.60.0"
fi

# The issue's space, with --epochs.
cat > "$out/space.json" <<JSON
{"base": {"model": "mlp", "epochs": $epochs},
 "search": {"lr": {"loguniform": [0.001, 0.2]}, "momentum": {"choice": [0.8, 0.9]},
            "global-batch": {"choice": [64, 128]}},
 "search_algorithm": "random", "seed": 1}
JSON
hpctrain=$build/bin/hpctrain
mpirun=(mpirun -n "$cpus" --oversubscribe)
"$hpctrain" data import-idx --help > /dev/null  # the binary is there
now() { date +%s.%N; }
echo "compare-ray-tune: $trials trials x $epochs epochs, ASHA grace 1 rf 2, $cpus CPUs, $per_trial per trial," \
     "target $target, budget $budget s, draws $draws; load $(cut -d' ' -f1-3 /proc/loadavg)"
for ((i = 1; i <= repeats; i++)); do
  rm -rf "$out/hpctrain-$i" "$out/ray-storage-$i"
  t0=$(now)
  "${mpirun[@]}" "$hpctrain" sweep --space "$out/space.json" --ranks-per-trial "$per_trial" --scheduler asha \
    --asha-grace-epochs 1 --asha-reduction-factor 2 --max-trials "$trials" --out "$out/hpctrain-$i" --quiet
  t1=$(now)
  points=()
  if [[ $draws == same ]]; then  # hpctrain's draws, in trial order
    /usr/bin/python3 -c 'import json, sys
records = sorted((json.loads(line) for line in open(sys.argv[1])), key=lambda r: r["trial"])
json.dump([r["params"] for r in records], open(sys.argv[2], "w"))' "$out/hpctrain-$i/results.jsonl" "$out/points-$i.json"
    points=(--points "$out/points-$i.json")
  fi
  "$ray_venv/bin/python" "$root/benchmarks/peers/ray_tune_asha.py" --space "$out/space.json" "${points[@]}" \
    --train "$HPCTRAIN_DATA_DIR/fashion-mnist-train.h5" --test "$HPCTRAIN_DATA_DIR/fashion-mnist-test.h5" \
    --trials "$trials" --cpus "$cpus" --cpus-per-trial "$per_trial" --grace 1 --reduction-factor 2 --storage "$out/ray-storage-$i" \
    > "$out/ray-$i.json"
  t2=$(now)
  /usr/bin/python3 - "$out" "$i" "$t0" "$t1" "$t2" "$target" "$budget" <<'PY'
import json, sys
out, i, t0, t1, t2, target, budget = sys.argv[1], sys.argv[2], *map(float, sys.argv[3:])
hp = [json.loads(line) for line in open(f"{out}/hpctrain-{i}/reports.jsonl")]
hp_summary = json.load(open(f"{out}/hpctrain-{i}/summary.json"))
ray = json.loads(open(f"{out}/ray-{i}.json").read().splitlines()[-1])
def to_target(reports):
    t = [r["seconds"] for r in reports if r["metric"] is not None and r["metric"] >= target]
    return min(t) if t else None
def within(reports):
    m = [r["metric"] for r in reports if r["metric"] is not None and r["seconds"] <= budget]
    return max(m) if m else None
rows = {"hpctrain": (hp, hp_summary["wall_seconds"], t1 - t0), "ray": (ray["reports"], ray["fit_seconds"], t2 - t1)}
print(f"| run {int(i)} | to {target:.2f} (s, from start) | whole sweep (s) | command (s) | best acc | best within {budget:.0f} s |")
print("| --- | --- | --- | --- | --- | --- |")
for name, (reports, sweep_s, command_s) in rows.items():
    tt = to_target(reports)
    best = max(r["metric"] for r in reports if r["metric"] is not None)
    w = within(reports)
    print(f"| {name} | {tt if tt is None else round(tt, 1)} | {sweep_s:.1f} | {command_s:.1f} | {best:.4f} | "
          f"{w if w is None else round(w, 4)} |")
a, b = to_target(hp), to_target(ray["reports"])
if a and b:
    print(f"compare-ray-tune: time to {target:.2f}: Ray / hpctrain = {b / a:.2f}x")
else:
    print(f"compare-ray-tune: a side did not reach {target:.2f}: lower --target or raise --epochs")
PY
done
echo "compare-ray-tune: load after $(cut -d' ' -f1-3 /proc/loadavg); raw files in $out"
