#!/usr/bin/env bash
# hpctrain ml vs scikit-learn 1.9 and PySpark 4.3 MLlib (PyPI) on the same data and cores, in
# one session; prints one Markdown table. See docs/ml.md ("Against scikit-learn and Spark").
#
#   scripts/compare-spark-sklearn.sh [--build DIR] [--out DIR] [--tasks "logreg kmeans linreg"]
#       (logreg runs hpctrain twice: --products f32, the default, and f64)
#       [--peers "sklearn spark"] [--ranks C] [--l2 1e-4] [--k 10] [--max-iter 300]
#       [--logreg-tol 1e-5] [--logreg-max-iter 5000] [--spark-max-iter 300] [--kmeans-tol 1e-4]
#       [--reg-rows 10000000] [--reg-cols 20]
#
# Data: Fashion-MNIST train (60,000 x 784, stored uint8 x 1/255) for logreg and kmeans (logreg's
# test accuracy on the test split); for linreg a synthetic set made here: x ~ N(0, 1) float32
# (numpy default_rng(1)), y = x w + 0.5 + N(0, 0.1^2) with w_j = (-1)^j (j + 1) / cols.
# Stopping rules:
#   logreg: ONE rule for hpctrain and scikit-learn: max |g_i| <= --logreg-tol on the gradient of
#           the same objective (1/n) sum CE + (l2/2)||W||^2 (sklearn C = 1/(n l2)): scikit-learn's
#           lbfgs `tol` (SciPy's pgtol) and hpctrain's --tol, both capped at --logreg-max-iter
#           (set so that neither side hits it). Spark's L-BFGS has no such rule (its tol is a
#           relative objective change): it runs --spark-max-iter iterations (its own time is long),
#           and the table also gives the seconds hpctrain took to reach each side's objective
#           (from hpctrain's per-iteration records), so sides that stop elsewhere still compare.
#           The "gap" column is each side's objective relative to the lowest one of the task.
#   kmeans: ONE rule for hpctrain and scikit-learn: the summed squared centre shift of an
#           iteration <= --kmeans-tol x the mean feature variance (scikit-learn's tol; hpctrain's
#           --stop shift, its default); Spark: its tol (every centre moves less than tol), its own
#           rule. Initialisation: hpctrain k-means||, scikit-learn k-means++, Spark k-means||; one
#           initialisation each.
#   linreg: normal equations on every side (scikit-learn: lstsq).
# The objective, inertia and test accuracy of every side are computed by one numpy scorer
# (benchmarks/peers/ml_peers.py) from the model each side returns, so they are comparable.
# Times are of the fit alone: hpctrain's `fit_seconds` (after the data is read, before the
# model is written), the peers' time around fit() with the data already in memory (Spark: a
# cached DataFrame). hpctrain runs C ranks of one thread; the peers use C cores.
# The peers live in a venv under the build folder ($build/ml-peer-venv), made on first use.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$root/build
out=""
tasks="logreg kmeans linreg"
peers="sklearn spark"
ranks=$(getconf _NPROCESSORS_ONLN)
l2=1e-4
k=10
max_iter=300
logreg_tol=1e-5
logreg_max_iter=5000
spark_max_iter=300
kmeans_tol=1e-4
reg_rows=10000000
reg_cols=20
while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --tasks) tasks=$2; shift 2 ;;
    --peers) peers=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --l2) l2=$2; shift 2 ;;
    --k) k=$2; shift 2 ;;
    --max-iter) max_iter=$2; shift 2 ;;
    --logreg-tol) logreg_tol=$2; shift 2 ;;
    --logreg-max-iter) logreg_max_iter=$2; shift 2 ;;
    --spark-max-iter) spark_max_iter=$2; shift 2 ;;
    --kmeans-tol) kmeans_tol=$2; shift 2 ;;
    --reg-rows) reg_rows=$2; shift 2 ;;
    --reg-cols) reg_cols=$2; shift 2 ;;
    -h|--help) sed -n '2,31p' "$0"; exit 0 ;;
    *) echo "compare-spark-sklearn: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

hpctrain=$build/bin/hpctrain
[[ -x $hpctrain ]] || { echo "compare-spark-sklearn: $hpctrain not found: build first (scripts/build.sh)" >&2; exit 1; }
venv=$build/ml-peer-venv
if [[ ! -x $venv/bin/python ]] || ! "$venv/bin/python" -c 'import sklearn, pyspark, pyarrow, h5py' 2>/dev/null; then
  echo "compare-spark-sklearn: installing scikit-learn 1.9, PySpark 4.3 into $venv (once)" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --upgrade pip
  "$venv/bin/pip" install --quiet 'scikit-learn==1.9.*' 'pyspark==4.3.*' pyarrow h5py numpy
fi
python=$venv/bin/python
peer_py=$root/benchmarks/peers/ml_peers.py
out=${out:-$root/results/compare-ml-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

source "$root/scripts/lib/fashion-mnist.sh"
ensure_fashion_mnist "$hpctrain"
reg=$out/regression-${reg_rows}x${reg_cols}.h5
if [[ " $tasks " == *" linreg "* && ! -f $reg ]]; then
  "$python" - "$reg" "$reg_rows" "$reg_cols" <<'PY'
import sys, h5py, numpy as np
path, n, d = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = np.random.default_rng(1)
w = np.array([(-1) ** j * (j + 1) / d for j in range(d)])
with h5py.File(path, "w") as f:
    s = f.create_dataset("samples", (n, d), np.float32, chunks=(min(n, 65536), d))
    t = f.create_dataset("targets", (n,), np.float64)
    for a in range(0, n, 1 << 20):
        b = min(n, a + (1 << 20))
        x = rng.standard_normal((b - a, d), dtype=np.float32)
        s[a:b] = x
        t[a:b] = x.astype(np.float64) @ w + 0.5 + rng.normal(0, 0.1, b - a)
    s.attrs["scale"] = 1.0
    f.attrs.update({"format": "hpctrain-dataset", "format_version": 1, "count": n, "shape": np.array([d])})
PY
fi

{
  echo "date: $(date -Is)"
  echo "host: $(hostname), $(getconf _NPROCESSORS_ONLN) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "hpctrain: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?'), $ranks ranks x 1 thread"
  echo "peers: $("$python" -c 'import sklearn, pyspark; print("scikit-learn", sklearn.__version__, "pyspark", pyspark.__version__)')"
} | tee "$out/context.txt"

run_hpctrain() {  # task label [extra args] -> JSON line (fit_seconds from hpctrain's summary, scored by ml_peers.py)
  local task=$1 label=$2; shift 2
  local model=$out/$label-$task.h5 metrics=$out/$label-$task.jsonl
  local -a args
  case $task in
    logreg) args=(logreg --data "$fashion_train" --eval-data "$fashion_test" --l2 "$l2" --max-iter "$logreg_max_iter" --tol "$logreg_tol") ;;
    kmeans) args=(kmeans --data "$fashion_train" --k "$k" --max-iter "$max_iter" --tol "$kmeans_tol") ;;
    linreg) args=(linreg --data "$reg") ;;
  esac
  mpirun -n "$ranks" --oversubscribe --bind-to core "$hpctrain" ml "${args[@]}" "$@" --metrics "$metrics" --out "$model" >&2
  local fit_s
  fit_s=$("$python" -c 'import json,sys; print([json.loads(l) for l in open(sys.argv[1])][-1]["fit_seconds"])' "$metrics")
  score "$task" hpctrain --model "$model" | "$python" -c 'import json,sys; d=json.loads(sys.stdin.read()); d["fit_seconds"]=float(sys.argv[1]); d["peer"]=sys.argv[2]; print(json.dumps(d))' "$fit_s" "$label"
}
score() {  # task peer [extra] -> JSON line
  local task=$1 peer=$2; shift 2
  local data=$fashion_train; [[ $task == linreg ]] && data=$reg
  local cap=$max_iter
  if [[ $task == logreg ]]; then
    cap=$logreg_max_iter
    [[ $peer == spark ]] && cap=$spark_max_iter
  fi
  "$python" "$peer_py" --peer "$peer" --task "$task" --data "$data" --eval-data "$fashion_test" --l2 "$l2" \
    --k "$k" --max-iter "$cap" --tol "$([[ $task == kmeans ]] && echo "$kmeans_tol" || echo "$logreg_tol")" \
    --cores "$ranks" --scratch "$out/peer-$task.parquet" "$@"
}

results=$out/results.jsonl
: > "$results"
for task in $tasks; do
  echo "compare-spark-sklearn: $task: hpctrain" >&2
  run_hpctrain "$task" hpctrain | tee -a "$results"
  if [[ $task == logreg ]]; then
    echo "compare-spark-sklearn: $task: hpctrain --products f64" >&2
    run_hpctrain "$task" hpctrain-f64 --products f64 | tee -a "$results"
  fi
  for peer in $peers; do
    echo "compare-spark-sklearn: $task: $peer" >&2
    score "$task" "$peer" | tee -a "$results"
  done
done

"$python" - "$results" "$out/hpctrain-logreg.jsonl" <<'PY' | tee "$out/table.md"
import json, os, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
# hpctrain's (default, f32 products) logreg per-iteration (objective, seconds): when it reached a value.
trace = []
if os.path.exists(sys.argv[2]):
    trace = [(r["objective"], r["seconds"]) for r in map(json.loads, open(sys.argv[2])) if r["type"] == "iteration"]
def reached(f):
    return next((s for o, s in trace if o <= f), None)
print("| task | side | fit s | iterations | objective / inertia / intercept | gap | test acc "
      "| fit s ÷ hpctrain's (default) fit s | hpctrain s to this objective | fit s ÷ that |")
print("|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    h = next(x for x in rows if x["task"] == r["task"] and x["peer"] == "hpctrain")
    q = r.get("objective", r.get("inertia", r.get("intercept")))
    best = min(x.get("objective", x.get("inertia", 0.0)) for x in rows if x["task"] == r["task"])
    gap = f"{(q - best) / best:.1e}" if r["task"] != "linreg" and best else ""
    acc = f'{100 * r["test_accuracy"]:.2f} %' if "test_accuracy" in r else ""
    to = reached(q) if r["task"] == "logreg" else None
    to_s = f"{to:.2f}" if to is not None else ""
    to_ratio = f'{r["fit_seconds"] / to:.1f}x' if to else ""
    print(f'| {r["task"]} | {r["peer"]} | {r["fit_seconds"]:.2f} | {r["iterations"]} | {q:.10g} | {gap} | {acc} | '
          f'{r["fit_seconds"] / h["fit_seconds"]:.1f}x | {to_s} | {to_ratio} |')
PY
echo "compare-spark-sklearn: results in $out" >&2
