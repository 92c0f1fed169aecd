#!/usr/bin/env bash
# hpctrain vs PyTorch DDP (gloo, CPU), same models, data, global batch, optimiser and steps,
# measured in one session; prints a Markdown table. See docs/benchmarks-training.md.
#
#   scripts/compare-torch.sh [--build DIR] [--out DIR] [--ranks "1 2"] [--models "mlp cnn"]
#                            [--mlp-epochs 2] [--cnn-epochs 1] [--cnn-max-steps 150] [--repeats 1]
#
# For every model and rank count P it runs, back to back, hpctrain (build/bin/bench_train in
# epochs mode: one training run, evaluation on the test split at the end) and
# benchmarks/peers/torch_ddp.py, both under `mpirun -n P`, one thread per rank. With --repeats N
# the pair runs N times (alternating sides) and the best samples/s of each side is kept (the
# machine is shared; its neighbours only ever slow a run down). The CNN run stops after
# --cnn-max-steps optimiser steps on both sides (0: whole epochs), then evaluates.
# Raw JSON (one file per run) and the table go to --out (default results/compare-torch-<time>).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$root/build
out=""
ranks="1 2"
models="mlp cnn"
mlp_epochs=2
cnn_epochs=1
cnn_max_steps=150
repeats=1
warmup=5
python=/usr/bin/python3  # Debian's, which has torch and h5py (the pyenv python3 on PATH has not)

while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --mlp-epochs) mlp_epochs=$2; shift 2 ;;
    --cnn-epochs) cnn_epochs=$2; shift 2 ;;
    --cnn-max-steps) cnn_max_steps=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "compare-torch: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

bench=$build/bin/bench_train
hpctrain=$build/bin/hpctrain
peer=$root/benchmarks/peers/torch_ddp.py
for f in "$bench" "$hpctrain"; do
  [[ -x $f ]] || { echo "compare-torch: $f not found: cmake --build $build --target hpctrain bench_train" >&2; exit 1; }
done
"$python" -c "import torch, h5py" 2>/dev/null ||
  { echo "compare-torch: $python lacks torch or h5py: apt-get install python3-torch python3-h5py" >&2; exit 1; }

out=${out:-$root/results/compare-torch-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"

# One thread per rank on both sides. OpenBLAS (hpctrain's gemm, and PyTorch's Linear layers
# through Debian's libblas) picks its kernels by CPU model and falls back to the slow generic
# "Prescott" kernels on CPUs newer than it knows (0.3.21 on Emerald Rapids does): name the
# instruction set unless the caller did.
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
if [[ -z ${OPENBLAS_CORETYPE:-} ]]; then
  if grep -qw avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX
  elif grep -qw avx2 /proc/cpuinfo; then export OPENBLAS_CORETYPE=Haswell
  fi
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun_flags=(--bind-to core -x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS -x MKL_NUM_THREADS)
[[ -n ${OPENBLAS_CORETYPE:-} ]] && mpirun_flags+=(-x OPENBLAS_CORETYPE)

# The Fashion-MNIST HDF5 files `hpctrain train` uses (imported once from Debian's IDX files).
data_dir=${HPCTRAIN_DATA_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/hpctrain}
train=$data_dir/fashion-mnist-train.h5
test=$data_dir/fashion-mnist-test.h5
for split in train test; do
  f=$data_dir/fashion-mnist-$split.h5
  if [[ ! -f $f ]]; then
    mkdir -p "$data_dir"
    idx=/usr/share/datasets/fashion-mnist
    [[ $split == train ]] && p=train || p=t10k
    "$hpctrain" data import-idx --fashion-mnist --images "$idx/$p-images-idx3-ubyte.gz" \
      --labels "$idx/$p-labels-idx1-ubyte.gz" --out "$f"
  fi
done

{
  echo "date: $(date -Is)"
  echo "host: $(hostname), $(getconf _NPROCESSORS_ONLN) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
  echo "hpctrain: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$root" diff --quiet 2>/dev/null || echo '+changes')"
  echo "torch: $("$python" -c 'import torch; print(torch.__version__)')"
  echo "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-} OMP_NUM_THREADS=$OMP_NUM_THREADS"
  echo "mlp: $mlp_epochs epochs; cnn: $cnn_epochs epochs, max steps $cnn_max_steps; warm-up $warmup steps; repeats $repeats"
} > "$out/environment.txt"
cat "$out/environment.txt"

run_hpctrain() {  # model P epochs max_steps file
  local model=$1 p=$2 epochs=$3 max_steps=$4 file=$5
  local cmd=(mpirun -n "$p" "${mpirun_flags[@]}" "$bench" --models="$model" --steps=0 --epochs="$epochs"
             --max_steps="$max_steps" --warmup="$warmup" --iters=1 --data="$train" --eval_data="$test"
             --benchmark_format=json)
  echo "+ ${cmd[*]}" >&2
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  "${cmd[@]}" > "$file"
}

run_torch() {  # model P epochs max_steps file
  local model=$1 p=$2 epochs=$3 max_steps=$4 file=$5
  local port=$((29500 + RANDOM % 2000))
  local cmd=(mpirun -n "$p" "${mpirun_flags[@]}" -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT=$port
             "$python" "$peer" --model "$model" --epochs "$epochs" --max-steps "$max_steps"
             --warmup-steps "$warmup" --data "$train" --eval-data "$test")
  echo "+ ${cmd[*]}" >&2
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  "${cmd[@]}" | grep '^{' > "$file"
}

start=$(date +%s)
for model in $models; do
  if [[ $model == mlp ]]; then epochs=$mlp_epochs max_steps=0; else epochs=$cnn_epochs max_steps=$cnn_max_steps; fi
  for p in $ranks; do
    for ((r = 1; r <= repeats; ++r)); do
      if ((r % 2)); then
        run_hpctrain "$model" "$p" "$epochs" "$max_steps" "$out/hpctrain-$model-p$p-r$r.json"
        run_torch "$model" "$p" "$epochs" "$max_steps" "$out/torch-$model-p$p-r$r.json"
      else
        run_torch "$model" "$p" "$epochs" "$max_steps" "$out/torch-$model-p$p-r$r.json"
        run_hpctrain "$model" "$p" "$epochs" "$max_steps" "$out/hpctrain-$model-p$p-r$r.json"
      fi
    done
  done
done
echo "compare-torch: runs took $(($(date +%s) - start)) s" | tee -a "$out/environment.txt"

"$python" - "$out" "$models" "$ranks" <<'EOF' | tee "$out/table.md"
import glob, json, os, sys

out, models, ranks = sys.argv[1], sys.argv[2].split(), [int(p) for p in sys.argv[3].split()]

def best(side, model, p):
    """The run with the best samples/s among the repeats: (samples/s, test accuracy, record)."""
    runs = []
    for f in sorted(glob.glob(os.path.join(out, f"{side}-{model}-p{p}-r*.json"))):
        text = open(f).read().strip()
        if not text:
            continue
        if side == "hpctrain":
            b = json.loads(text)["benchmarks"][0]
            runs.append((b["samples_per_s"], b.get("test_accuracy"), b))
        else:
            r = json.loads(text.splitlines()[-1])
            runs.append((r["samples_per_s"], r.get("test_accuracy"), r))
    return max(runs, key=lambda r: r[0]) if runs else (None, None, None)

def fmt(x, spec, unit=""):
    return "—" if x is None else format(x, spec) + unit

rows = ["| model | P | hpctrain samples/s | torch samples/s | ratio | hpctrain test acc | torch test acc "
        "| hpctrain scaling 1→P | torch scaling 1→P | hpctrain compute / comm / data | CPU util hpctrain / torch |",
        "|---|---|---|---|---|---|---|---|---|---|---|"]
for model in models:
    base = {side: best(side, model, ranks[0])[0] for side in ("hpctrain", "torch")}
    for p in ranks:
        h, ha, hb = best("hpctrain", model, p)
        t, ta, tb = best("torch", model, p)
        ratio = h / t if h and t else None
        def eff(s, side):
            b = base[side]
            return s / (p / ranks[0] * b) if s and b and p != ranks[0] else None
        split = (f"{hb['compute_frac']:.2f} / {hb['comm_frac']:.2f} / {hb['data_frac']:.2f}" if hb else "n/a")
        util = f"{fmt(hb and hb.get('cpu_util'), '.2f')} / {fmt(tb and tb.get('cpu_util'), '.2f')}"
        rows.append(f"| {model} | {p} | {fmt(h, '.0f')} | {fmt(t, '.0f')} | {fmt(ratio, '.2f', '×')} "
                    f"| {fmt(None if ha is None else 100 * ha, '.2f', '%')} | {fmt(None if ta is None else 100 * ta, '.2f', '%')} "
                    f"| {fmt(eff(h, 'hpctrain') and 100 * eff(h, 'hpctrain'), '.0f', '%')} "
                    f"| {fmt(eff(t, 'torch') and 100 * eff(t, 'torch'), '.0f', '%')} | {split} | {util} |")
print("\n".join(rows))
print()
print("Scaling 1→P = S_P / (P · S_1) (strong scaling, fixed global batch 128). Ratio = hpctrain / torch "
      "samples/s. Test accuracy on the 10,000-sample test split after the same steps on both sides. "
      "CPU util = rank 0's process CPU seconds / wall seconds (1.0 = it had its core to itself; "
      "less = neighbours took some). compute / comm / data = rank 0's shares of its run time "
      "(comm = exposed all-reduce wait).")
EOF
