#!/usr/bin/env bash
# hpctrain predict's forward pass (build/bin/bench_predict at P = 1 and 2 ranks) vs PyTorch 2.15
# torch.no_grad() inference of the same models (benchmarks/peers/torch_predict.py, 1 process
# with as many threads as cores), back to back in one session on the same cores; prints one
# Markdown table. See docs/serving.md.
#
#   scripts/compare-torch-predict.sh [--build DIR] [--out DIR] [--models mlp,cnn] [--samples 10000]
#       [--batch 256] [--iters 5] [--ranks "1 2"] [--repeats 2]
#
# The sides alternate --repeats times; each side's best median is kept (neighbours on a shared
# machine only ever slow a run down). hpctrain runs under `mpirun --bind-to none`, so P ranks
# get cores / P compute threads each (Open MPI binds 1 or 2 ranks to one core each otherwise).
# The peer runs from a virtual environment with torch 2.15.0 at $HPCTRAIN_PEER_VENV (default
# $build/peer-venv), created with pip on first use as scripts/compare-torch.sh does. hpctrain at
# P ranks runs with cores / P compute threads per rank (the Environment's default).
set -euo pipefail
# Open MPI refuses to run as root unless told (these machines run as root).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$root/build
out=""
models=mlp,cnn
samples=10000
batch=256
iters=5
ranks="1 2"
repeats=2
while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --samples) samples=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "compare-torch-predict: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
bench=$build/bin/bench_predict
[[ -x $bench ]] || { echo "compare-torch-predict: $bench not found: cmake --build $build --target bench_predict" >&2; exit 1; }

venv=${HPCTRAIN_PEER_VENV:-$build/peer-venv}
python=$venv/bin/python
if ! "$python" -c "import torch, h5py, numpy; assert torch.__version__.startswith('2.15')" 2>/dev/null; then
  echo "compare-torch-predict: installing torch==2.15.0, h5py and numpy from PyPI into $venv (once; several GB)" >&2
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check torch==2.15.0 h5py numpy
fi

out=${out:-$root/results/compare-torch-predict-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"
cores=$(getconf _NPROCESSORS_ONLN)
export OMPI_MCA_rmaps_base_oversubscribe=1
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$out/load.txt"
for rep in $(seq "$repeats"); do
  for p in $ranks; do
    mpirun --bind-to none -n "$p" "$bench" --models="$models" --samples="$samples" --batch="$batch" --iters="$iters" \
      --benchmark_format=json --benchmark_out="$out/hpctrain-p$p-r$rep.json" > /dev/null
  done
  "$python" "$root/benchmarks/peers/torch_predict.py" --models "$models" --threads "$cores" --samples "$samples" \
    --batch "$batch" --iters "$iters" >> "$out/torch.jsonl"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/load.txt"

/usr/bin/python3 - "$out" "$ranks" "$cores" <<'PY'
import glob, json, os, sys
out, ranks, cores = sys.argv[1], sys.argv[2].split(), int(sys.argv[3])
torch = {}
for j in map(json.loads, open(os.path.join(out, "torch.jsonl"))):
    if j["model"] not in torch or j["samples_per_s"] > torch[j["model"]]["samples_per_s"]:
        torch[j["model"]] = j
rows = ["| model | hpctrain ranks x threads | hpctrain samples/s | torch %s 1 x %d samples/s | ratio |" %
        (next(iter(torch.values()))["torch"], cores), "|---|---|---|---|---|"]
for p in ranks:
    best = {}
    for path in sorted(glob.glob(os.path.join(out, f"hpctrain-p{p}-r*.json"))):
        for b in json.load(open(path))["benchmarks"]:
            model = b["name"].split("/")[1]
            if model not in best or b["samples_per_s"] > best[model]["samples_per_s"]:
                best[model] = b
    for model, b in best.items():
        t = torch[model]["samples_per_s"]
        rows.append(f"| {model} | {p} x {int(b['threads'])} | {b['samples_per_s']:,.0f} | {t:,.0f} | {b['samples_per_s'] / t:.2f}x |")
table = "\n".join(rows)
open(os.path.join(out, "table.md"), "w").write(table + "\n")
print(table)
PY
