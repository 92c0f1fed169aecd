#!/usr/bin/env bash
# Throughput of training on a data set larger than memory, against the same training on a subset
# held in memory (docs/data.md, "Out of core"). For each model: a synthetic --dtype data set of
# --factor x a memory cap is streamed by `hpctrain train` with both ranks and mpirun inside a
# cgroup-v1 memory group limited to the cap (page cache included, so batches come from the disk
# once the cache is full); then the first --subset samples, written as their own file, train
# the same model, batch and steps with the subset held in memory (no cap). Runs alternate,
# --repeats times; the best of each side is kept (neighbours only slow a run down).
#
#   scripts/bench-out-of-core.sh [--build DIR] [--out DIR] [--cap-mib 512] [--factor 4.2]
#       [--models "mlp cnn"] [--mlp-steps 3000] [--cnn-steps 300] [--subset 60000] [--repeats 2]
#       [--ranks 2] [--shuffle-block 64] [--dtype float32|uint8]
#
# --shuffle-block S (default 64; 1 = sample by sample) is passed to both sides: batches of S-sample
# runs, which a disk serves far faster than scattered samples (docs/data.md).
# --dtype (default float32, 3136 bytes a sample) or uint8 (784 bytes, as images are stored: the
# same bytes on disk hold 4x the samples, so a step reads a quarter of the bytes).
# Needs root and a writable cgroup v1 memory controller (/sys/fs/cgroup/memory). Writes one JSON
# line per run and a Markdown table to --out (default results/out-of-core-<time>); prints the
# table. Run it on a quiet machine (it prints the load before and after).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$root/build
out=""
cap_mib=512
factor=4.2
models="mlp cnn"
mlp_steps=3000
cnn_steps=300
subset=60000
repeats=2
ranks=2
shuffle_block=64
dtype=float32

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --cap-mib) cap_mib=$2; shift 2 ;;
    --factor) factor=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --mlp-steps) mlp_steps=$2; shift 2 ;;
    --cnn-steps) cnn_steps=$2; shift 2 ;;
    --subset) subset=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --shuffle-block) shuffle_block=$2; shift 2 ;;
    --dtype) dtype=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench-out-of-core: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
hpctrain=$build/bin/hpctrain
[[ -x $hpctrain ]] || { echo "bench-out-of-core: no $hpctrain (build first: scripts/build.sh)" >&2; exit 1; }
cg_root=/sys/fs/cgroup/memory
[[ -w $cg_root && -e $cg_root/memory.limit_in_bytes ]] ||
  { echo "bench-out-of-core: needs root and a writable cgroup v1 memory controller at $cg_root" >&2; exit 1; }
out=${out:-$root/results/out-of-core-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out"
work=$(mktemp -d "$out/data-XXXXXX")
group=$cg_root/hpctrain-bench-out-of-core-$$
cleanup() { [[ -d $group ]] && rmdir "$group" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
case $dtype in
  float32) sample_bytes=3136 ;;  # 1x28x28 float32
  uint8) sample_bytes=784 ;;
  *) echo "bench-out-of-core: --dtype '$dtype' is neither float32 nor uint8" >&2; exit 2 ;;
esac
samples=$(awk -v c="$cap_mib" -v f="$factor" -v b="$sample_bytes" 'BEGIN { printf "%d", c * 1048576 * f / b }')
(( subset < samples )) || { echo "bench-out-of-core: --subset $subset is not below the $samples samples" >&2; exit 2; }
echo "writing $samples $dtype samples ($(( samples * sample_bytes / 1048576 )) MiB, ${factor}x the ${cap_mib} MiB cap) and a subset of $subset"
"$hpctrain" data synth --samples "$samples" --shape 1,28,28 --dtype "$dtype" --seed 3 --out "$work/big.h5"
"$hpctrain" data synth --samples "$subset" --shape 1,28,28 --dtype "$dtype" --seed 3 --out "$work/subset.h5"
mkdir "$group"
echo $(( cap_mib * 1048576 )) > "$group/memory.limit_in_bytes"

# run MODEL SIDE REPEAT: one training run; appends a JSON line to $out/runs.jsonl
run() {
  local model=$1 side=$2 rep=$3 steps data metrics
  steps=$([[ $model == mlp ]] && echo "$mlp_steps" || echo "$cnn_steps")
  metrics=$work/$model-$side-$rep.jsonl
  local cmd=(mpirun -n "$ranks" --bind-to core "$hpctrain" train --model "$model" --no-eval --max-steps "$steps"
             --epochs 1000 --global-batch 128 --seed 5 --log-every 0 --shuffle-block "$shuffle_block" --metrics "$metrics")
  if [[ $side == streamed ]]; then
    sync; echo 1 > /proc/sys/vm/drop_caches
    timeout -k 5 1800 sh -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' sh "$group" \
      "${cmd[@]}" --data "$work/big.h5" --data-in-memory-mib 0 > "$work/log" 2>&1 ||
      { cat "$work/log"; echo "bench-out-of-core: the streamed $model run failed" >&2; exit 1; }
  else
    timeout -k 5 1800 "${cmd[@]}" --data "$work/subset.h5" --data-in-memory-mib 4096 > "$work/log" 2>&1 ||
      { cat "$work/log"; echo "bench-out-of-core: the in-memory $model run failed" >&2; exit 1; }
  fi
  local summary rate rss
  summary=$(grep '"type":"summary"' "$metrics" | tail -1)
  rate=$(sed -E 's/.*"samples_per_s":([0-9.e+]+).*/\1/' <<<"$summary")
  rss=$(sed -E 's/.*"peak_rss_bytes":([0-9]+).*/\1/' <<<"$summary")
  printf '{"model":"%s","side":"%s","repeat":%d,"steps":%d,"samples_per_s":%s,"peak_rss_bytes":%s,"data_samples":%d,"cap_mib":%d,"shuffle_block":%d,"dtype":"%s"}\n' \
    "$model" "$side" "$rep" "$steps" "$rate" "$rss" "$([[ $side == streamed ]] && echo "$samples" || echo "$subset")" \
    "$cap_mib" "$shuffle_block" "$dtype" | tee -a "$out/runs.jsonl"
}

for model in $models; do
  for rep in $(seq 1 "$repeats"); do
    run "$model" streamed "$rep"
    run "$model" in-memory "$rep"
  done
done
echo "cgroup: peak usage $(cat "$group/memory.max_usage_in_bytes") bytes (page cache included), OOM kills $(awk '/^oom_kill /{print $2}' "$group/memory.oom_control")"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$out/runs.jsonl" "$samples" "$subset" "$cap_mib" "$ranks" > "$out/table.md" <<'PY'
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
print(f"| model | streamed, {int(sys.argv[2]):,} samples under a {sys.argv[4]} MiB cap (samples/s) | "
      f"in memory, {int(sys.argv[3]):,}-sample subset (samples/s) | ratio | peak RSS streamed (MB) |")
print("|---|---|---|---|---|")
for model in dict.fromkeys(r["model"] for r in runs):
    best = {s: max((r for r in runs if r["model"] == model and r["side"] == s), key=lambda r: r["samples_per_s"])
            for s in ("streamed", "in-memory")}
    ratio = best["streamed"]["samples_per_s"] / best["in-memory"]["samples_per_s"]
    print(f"| {model} ({sys.argv[5]} ranks) | {best['streamed']['samples_per_s']:,.0f} | "
          f"{best['in-memory']['samples_per_s']:,.0f} | **{ratio:.2f}** | {best['streamed']['peak_rss_bytes'] / 1e6:.0f} |")
PY
cat "$out/table.md"
echo "runs: $out/runs.jsonl"
