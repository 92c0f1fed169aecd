#!/usr/bin/env bash
# hpctrain vs PyTorch 2.15 (PyPI), same models, data, init family, global batch, optimiser and
# steps, measured in one session on the same cores; prints one Markdown table.
# See docs/benchmarks-training.md.
#
#   scripts/compare-torch.sh [--build DIR] [--out DIR] [--models "mlp cnn resnet transformer CONFIG.json ..."]
#       (default: mlp, cnn and benchmarks/models/cnn-k3-3conv.json)
#       [--hpctrain-configs "2x1 1x2"] [--torch-configs "1x2 2x1"]
#       [--mlp-epochs 2] [--cnn-epochs 1] [--cnn-max-steps 150] [--repeats 1] [--seeds "1 2 3"]
#
# --seeds "S1 S2 ...": every run is repeated with each seed: the initial parameters and the epoch
# order on both sides (bench_train --seed=S --init_seed=S, torch_ddp.py --seed S; the two sides
# draw different values from the same seed). Without --seeds: bench_train's defaults (epoch
# order 42, the model config's own init seed) and torch's --seed 42. With more than one
# seed the table's accuracies are the mean over the seeds of each side's best configuration, with
# their standard deviation and count: one run's accuracy moves by a few tenths with the seed.
#
# A --models entry ending in .json is an hpctrain model config (e.g. benchmarks/models/
# cnn-k3-3conv.json: other kernel, channel and layer counts), which the peer mirrors with
# --model-config; a cnn config runs like the cnn (--cnn-epochs, --cnn-max-steps).
# A configuration RxT is R ranks (processes, under mpirun) of T threads each; the defaults are
# "C x 1" and "1 x C" for the machine's C cores, on both sides: torch's two usual CPU setups
# (one process with C intra-op threads; DDP over gloo with C single-thread ranks) and
# hpctrain's (one rank per core; one rank with C threads for OpenBLAS and oneDNN). For every
# model each configuration runs back to back (alternating sides with --repeats N, best kept:
# neighbours only ever slow a run down); each side's best configuration is compared. With
# --repeats N >= 2 the table also gives each repeat's ratio (the two sides' best runs of that
# repeat, minutes apart at most) and their median: on a shared machine whose speed changes from
# one minute to the next, the best-of-all ratio can pair one side's fast minute with the
# other's slow one, and the median of the per-repeat ratios is the steadier figure.
#
# The peer is PyTorch 2.15.0 from PyPI in a virtual environment under the build folder
# ($build/peer-venv), created with pip on first use (several GB: the wheel pulls CUDA
# libraries; once). hpctrain runs build/bin/bench_train in epochs mode (one training run,
# evaluation on the test split at the end) — the code `hpctrain train` runs. The CNN run stops
# after --cnn-max-steps optimiser steps on both sides (0: whole epochs), then evaluates.
# The sgemm bound: bench_kernels' 1-thread OpenBLAS sgemm 1024^3, measured in the same run,
# times the cores; frac_of_sgemm = samples/s x training FLOPs per sample / that bound.
# Raw JSON (one file per run) and the table go to --out (default results/compare-torch-<time>).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$root/build
out=""
models="mlp cnn $root/benchmarks/models/cnn-k3-3conv.json"
cores=$(getconf _NPROCESSORS_ONLN)
hpctrain_configs="${cores}x1 1x${cores}"
torch_configs="1x${cores} ${cores}x1"
mlp_epochs=2
cnn_epochs=1
cnn_max_steps=150
repeats=1
seeds=""
warmup=5

while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --hpctrain-configs) hpctrain_configs=$2; shift 2 ;;
    --torch-configs) torch_configs=$2; shift 2 ;;
    --mlp-epochs) mlp_epochs=$2; shift 2 ;;
    --cnn-epochs) cnn_epochs=$2; shift 2 ;;
    --cnn-max-steps) cnn_max_steps=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --seeds) seeds=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "compare-torch: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
explicit_seeds=$seeds
seeds=${seeds:-default}
for s in $explicit_seeds; do
  [[ $s =~ ^[0-9]+$ ]] || { echo "compare-torch: --seeds entry '$s' is not a non-negative integer" >&2; exit 2; }
done
for c in $hpctrain_configs $torch_configs; do
  [[ $c =~ ^[1-9][0-9]*x[1-9][0-9]*$ ]] || { echo "compare-torch: configuration '$c' is not RANKSxTHREADS (e.g. 2x1)" >&2; exit 2; }
done

bench=$build/bin/bench_train
kernels=$build/bin/bench_kernels
hpctrain=$build/bin/hpctrain
peer=$root/benchmarks/peers/torch_ddp.py
for f in "$bench" "$hpctrain" "$kernels"; do
  [[ -x $f ]] || { echo "compare-torch: $f not found: cmake --build $build --target hpctrain bench_train bench_kernels" >&2; exit 1; }
done

# PyTorch 2.15 from PyPI, in a venv of its own (Debian's python3-torch is 1.13).
venv=$build/peer-venv
python=$venv/bin/python
if ! "$python" -c "import torch, h5py, numpy; assert torch.__version__.startswith('2.15')" 2>/dev/null; then
  echo "compare-torch: installing torch==2.15.0, h5py and numpy from PyPI into $venv (once; several GB)" >&2
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check torch==2.15.0 h5py numpy
fi

out=${out:-$root/results/compare-torch-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"

# OpenBLAS picks its kernels by CPU model and falls back to the slow generic "Prescott"
# kernels on CPUs newer than it knows (0.3.21 on Emerald Rapids does): name the instruction
# set unless the caller did (hpctrain does this itself; torch's MKL does not need it).
# The sgemm bound is only a bound with the widest kernels the CPU runs, so the script picks them
# by the CPU's flags even over an inherited OPENBLAS_CORETYPE (some images export Haswell on
# AVX-512 machines); HPCTRAIN_KEEP_BLAS_CORETYPE=1 keeps the inherited one.
inherited_coretype=${OPENBLAS_CORETYPE:-}
if [[ -z $inherited_coretype || -z ${HPCTRAIN_KEEP_BLAS_CORETYPE:-} ]]; then
  if grep -qw avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX
  elif grep -qw avx2 /proc/cpuinfo; then export OPENBLAS_CORETYPE=Haswell
  fi
fi
unset OMP_NUM_THREADS OPENBLAS_NUM_THREADS MKL_NUM_THREADS HPCTRAIN_THREADS_PER_RANK
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# mpirun flags for R ranks of T threads: each rank bound to its own T cores.
mpirun_flags() {  # threads
  local t=$1 f=(--map-by "slot:PE=$1" --bind-to core)
  [[ -n ${OPENBLAS_CORETYPE:-} ]] && f+=(-x OPENBLAS_CORETYPE)
  echo "${f[@]}"
}

# The Fashion-MNIST HDF5 files `hpctrain train` uses (imported once from Debian's IDX files).
source "$root/scripts/lib/fashion-mnist.sh"
ensure_fashion_mnist "$hpctrain"
train=$fashion_train
test=$fashion_test

{
  echo "date: $(date -Is)"
  echo "host: $(hostname), $cores cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
  echo "hpctrain: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$root" diff --quiet 2>/dev/null || echo '+changes')"
  echo "torch: $("$python" -c 'import torch; print(torch.__version__)')"
  echo "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-} (inherited: ${inherited_coretype:-none}); hpctrain configs: $hpctrain_configs; torch configs: $torch_configs"
  echo "mlp: $mlp_epochs epochs; cnn: $cnn_epochs epochs, max steps $cnn_max_steps; warm-up $warmup steps; repeats $repeats; seeds $seeds"
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$out/environment.txt"
cat "$out/environment.txt"

# The label of a --models entry in file names and the table: mlp, cnn, or a config's base name.
model_label() { local b=${1##*/}; echo "${b%.json}"; }
# Image models (cnn, resnet, transformer and their configs) run --cnn-epochs / --cnn-max-steps.
is_cnn() { [[ $1 == cnn || $1 == resnet || $1 == transformer ]] ||
  { [[ $1 == *.json ]] && grep -Eq '"(cnn|resnet|transformer)"' "$1"; }; }
for model in $models; do
  [[ $model == mlp || $model == cnn || $model == resnet || $model == transformer || ( $model == *.json && -f $model ) ]] ||
    { echo "compare-torch: --models entry '$model' is neither mlp, cnn, resnet, transformer nor an existing .json model config" >&2; exit 2; }
done

run_hpctrain() {  # model config epochs max_steps file seed
  local model=$1 config=$2 epochs=$3 max_steps=$4 file=$5 seed=$6 seeding=()
  [[ $seed != default ]] && seeding=(--seed="$seed" --init_seed="$seed")
  local r=${config%x*} t=${config#*x}
  local cmd=(mpirun -n "$r" $(mpirun_flags "$t") -x HPCTRAIN_THREADS_PER_RANK="$t" "$bench" --models="$model"
             --steps=0 --epochs="$epochs" --max_steps="$max_steps" --warmup="$warmup" --iters=1
             "${seeding[@]}" --data="$train" --eval_data="$test" --benchmark_format=json)
  echo "+ ${cmd[*]}   (load $(cut -d' ' -f1 /proc/loadavg))" >&2
  "${cmd[@]}" > "$file"
}

run_torch() {  # model config epochs max_steps file seed
  local model=$1 config=$2 epochs=$3 max_steps=$4 file=$5 seed=$6 seeding=()
  [[ $seed != default ]] && seeding=(--seed "$seed")
  local r=${config%x*} t=${config#*x}
  local port=$((29500 + RANDOM % 2000)) which=(--model "$model")
  [[ $model == *.json ]] && which=(--model-config "$model")
  local cmd=(mpirun -n "$r" $(mpirun_flags "$t") -x OMP_NUM_THREADS="$t" -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT=$port
             "$python" "$peer" "${which[@]}" --threads "$t" "${seeding[@]}" --epochs "$epochs" --max-steps "$max_steps"
             --warmup-steps "$warmup" --data "$train" --eval-data "$test")
  echo "+ ${cmd[*]}   (load $(cut -d' ' -f1 /proc/loadavg))" >&2
  "${cmd[@]}" | grep '^{' > "$file"
}

start=$(date +%s)
"$kernels" --benchmark_filter='bound/' --benchmark_format=json --benchmark_repetitions=3 \
  --benchmark_report_aggregates_only=true > "$out/sgemm-bound.json" 2>/dev/null
for model in $models; do
  if is_cnn "$model"; then epochs=$cnn_epochs max_steps=$cnn_max_steps; else epochs=$mlp_epochs max_steps=0; fi
  label=$(model_label "$model")
  for ((rep = 1; rep <= repeats; ++rep)); do
    for seed in $seeds; do
      run_side() {  # side
        local side=$1 c
        if [[ $side == hpctrain ]]; then
          for c in $hpctrain_configs; do
            run_hpctrain "$model" "$c" "$epochs" "$max_steps" "$out/hpctrain-$label-$c-r$rep-s$seed.json" "$seed"
          done
        else
          for c in $torch_configs; do
            run_torch "$model" "$c" "$epochs" "$max_steps" "$out/torch-$label-$c-r$rep-s$seed.json" "$seed"
          done
        fi
      }
      if ((rep % 2)); then run_side hpctrain; run_side torch; else run_side torch; run_side hpctrain; fi
    done
  done
done
echo "compare-torch: runs took $(($(date +%s) - start)) s; load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/environment.txt"

labels=$(for m in $models; do model_label "$m"; done | tr '\n' ' ')
"$python" - "$out" "$labels" "$hpctrain_configs" "$torch_configs" "$cores" "$models" "$seeds" "$repeats" <<'EOF2' | tee "$out/table.md"
import glob, json, os, sys

out, models = sys.argv[1], sys.argv[2].split()
hconfigs, tconfigs, cores = sys.argv[3].split(), sys.argv[4].split(), int(sys.argv[5])
repeats = int(sys.argv[8])
seeds = sys.argv[7].split()
paths = dict(zip(models, sys.argv[6].split()))  # label -> mlp, cnn or a config file
# Training FLOPs per sample (benchmarks/bench_train.cpp's header derives them).
FLOP_PER_SAMPLE = {"mlp": 2.41e6, "cnn": 67.6e6, "resnet": 55.85e6, "transformer": 14.46e6}  # bench_train's train_flop_per_sample

bound = json.load(open(os.path.join(out, "sgemm-bound.json")))["benchmarks"]
sgemm_1t = max(b["GFLOPs"] for b in bound if b.get("aggregate_name") in ("median", "mean", None)) * 1e9
sgemm_machine = sgemm_1t * cores

def runs(side, model, config, repeat="*"):
    """(samples/s, test accuracy) of every repeat (or of one) of one side/model/config."""
    found = []
    for f in sorted(glob.glob(os.path.join(out, f"{side}-{model}-{config}-r{repeat}-s*.json"))):
        text = open(f).read().strip()
        if not text:
            continue
        if side == "hpctrain":
            b = json.loads(text)["benchmarks"][0]
            found.append((b["samples_per_s"], b.get("test_accuracy")))
        else:
            r = json.loads(text.splitlines()[-1])
            found.append((r["samples_per_s"], r.get("test_accuracy")))
    return found

def flop_per_sample_of_config(path):
    """Training FLOPs per sample of an hpctrain model config, by bench_train's formula: 2 per
    multiply-add; forward, weight gradient and input gradient (none for the first layer's input)."""
    cfg = json.load(open(path))
    if cfg["name"] not in ("mlp", "cnn"):
        return None  # only the built-in resnet's count is known (FLOP_PER_SAMPLE)
    total, first, side, width = 0.0, True, 28, 784
    if cfg["name"] == "cnn":
        c, k, pool = 1, cfg.get("kernel", 5), cfg.get("pool", 2)
        for ch in cfg.get("channels", [32, 64]):
            total += 2.0 * c * k * k * ch * side * side * (2 if first else 3)
            first, c, side = False, ch, side // pool
        width = c * side * side
    for h in cfg.get("hidden", [512, 256] if cfg["name"] == "mlp" else [256]) + [10]:
        total += 2.0 * width * h * (2 if first else 3)
        first, width = False, h
    return total

def best(side, model, configs):
    cands = [(s, a, c) for c in configs for (s, a) in runs(side, model, c)]
    return max(cands, key=lambda r: r[0]) if cands else (None, None, None)

def repeat_ratios(model):
    """Per repeat (and seed), hpctrain's best configuration over torch's best in that repeat: the
    two sides ran back to back, so a slow phase of a shared machine hits both of a repeat's runs
    more often than the best-of-all ratio, which can pair one side's fast minute with the other's slow one."""
    ratios = []
    for r in range(1, repeats + 1):
        h = max((s for c in hconfigs for s, _ in runs("hpctrain", model, c, r)), default=None)
        t = max((s for c in tconfigs for s, _ in runs("torch", model, c, r)), default=None)
        if h and t:
            ratios.append(h / t)
    return ratios

def median(xs):
    xs = sorted(xs)
    return None if not xs else (xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2)

def fmt(x, spec, unit=""):
    return "—" if x is None else format(x, spec) + unit

def accuracy(side, model, config, single):
    """The test accuracy to print for `config`: with one seed, the best run's (`single`); with
    several, the mean over every run of that configuration, ± the sample standard deviation."""
    accs = [100 * a for _, a in runs(side, model, config) if a is not None]
    if len(seeds) < 2 or len(accs) < 2:
        return fmt(None if single is None else 100 * single, '.2f', '%')
    mean = sum(accs) / len(accs)
    sd = (sum((a - mean) ** 2 for a in accs) / (len(accs) - 1)) ** 0.5
    return f"{mean:.2f}% ± {sd:.2f} (n={len(accs)})"

print(f"sgemm bound: {sgemm_1t / 1e9:.0f} GFLOP/s per core (OpenBLAS, 1 thread, 1024^3) x {cores} cores\n")
rows = ["| model | hpctrain config | hpctrain samples/s | torch best config | torch samples/s | ratio "
        "| ratio per repeat (median) | hpctrain test acc | torch test acc | hpctrain frac of sgemm bound | all configs (samples/s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|"]
for model in models:
    h, ha, hc = best("hpctrain", model, hconfigs)
    t, ta, tc = best("torch", model, tconfigs)
    ratio = h / t if h and t else None
    flop = FLOP_PER_SAMPLE.get(model) or flop_per_sample_of_config(paths[model])
    frac = h * flop / sgemm_machine if h and flop else None
    every = ", ".join(
        [f"hpctrain {c}: {fmt(max((s for s, _ in runs('hpctrain', model, c)), default=None), '.0f')}" for c in hconfigs] +
        [f"torch {c}: {fmt(max((s for s, _ in runs('torch', model, c)), default=None), '.0f')}" for c in tconfigs])
    per_repeat = repeat_ratios(model)
    per_repeat_text = (", ".join(f"{x:.2f}" for x in per_repeat) + f" ({median(per_repeat):.2f}×)") if per_repeat else "—"
    rows.append(f"| {model} | {hc or '—'} | {fmt(h, '.0f')} | {tc or '—'} | {fmt(t, '.0f')} | {fmt(ratio, '.2f', '×')} "
                f"| {per_repeat_text} | {accuracy('hpctrain', model, hc, ha)} | {accuracy('torch', model, tc, ta)} "
                f"| {fmt(frac, '.2f')} | {every} |")
print("\n".join(rows))
print()
print(("Test accuracy: mean ± standard deviation over the seeds " + " ".join(seeds) + " (n runs). " if len(seeds) > 1 else "") + "Config RxT = R ranks x T threads. Ratio = hpctrain best / torch best samples/s (global batch 128, "
      "after the warm-up steps); per repeat: the same within each repeat, whose runs ran back to back "
      "(the sides alternate which goes first), and their median. Test accuracy on the 10,000-sample test split after the same steps. "
      "frac of sgemm bound = samples/s x training FLOPs per sample / (1-thread sgemm x cores).")
EOF2
