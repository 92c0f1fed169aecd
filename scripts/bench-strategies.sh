#!/usr/bin/env bash
# ddp vs zero1 (and zero2) in one session: samples/s on the MLP and the CNN at P ranks, bf16
# gradients on the MLP, and memory per rank (optimiser state, peak RSS) on a 53.6 M-parameter
# wide MLP (benchmarks/models/wide-mlp-54m.json) with AdamW, each strategy in its own process
# (peak RSS is per process). With a PyTorch 2.15 venv ($HPCTRAIN_PEER_VENV, default
# build/peer-venv; see scripts/compare-torch.sh) the peer runs in the same session:
# benchmarks/peers/torch_ddp.py as DDP and as DDP + ZeroRedundancyOptimizer (gloo).
# See docs/strategies.md. Raw output goes to --out (default results/strategies-<time>).
#
#   scripts/bench-strategies.sh [--build DIR] [--out DIR] [--ranks 2] [--mlp-steps 300]
#       [--cnn-steps 40] [--iters 3] [--memory-ranks "2 4"]
set -euo pipefail
# Open MPI refuses to run as root unless told (these machines run as root).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$root/build
out=""
ranks=2
mlp_steps=300
cnn_steps=40
iters=3
memory_ranks="2 4"
while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --mlp-steps) mlp_steps=$2; shift 2 ;;
    --cnn-steps) cnn_steps=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --memory-ranks) memory_ranks=$2; shift 2 ;;
    *) echo "bench-strategies.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
out=${out:-$root/results/strategies-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"
venv=${HPCTRAIN_PEER_VENV:-$build/peer-venv}
mpi=(mpiexec -n "$ranks" --oversubscribe)
bench=$build/bin/bench_train
wide=$root/benchmarks/models/wide-mlp-54m.json
data=${HPCTRAIN_DATA_DIR:-$HOME/.cache/hpctrain}/fashion-mnist-train.h5

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$out/load.txt"
"${mpi[@]}" "$bench" --models=mlp --steps="$mlp_steps" --iters="$iters" --strategies=ddp,zero1,zero2 \
  --benchmark_out="$out/mlp.json" --benchmark_out_format=json | tee "$out/mlp.txt"
"${mpi[@]}" "$bench" --models=mlp --steps="$mlp_steps" --iters="$iters" --strategies=ddp,zero1 --grad_dtype=bf16 \
  --benchmark_out="$out/mlp-bf16.json" --benchmark_out_format=json | tee "$out/mlp-bf16.txt"
"${mpi[@]}" "$bench" --models=cnn --steps="$cnn_steps" --iters="$iters" --strategies=ddp,zero1 \
  --benchmark_out="$out/cnn.json" --benchmark_out_format=json | tee "$out/cnn.txt"
for p in $memory_ranks; do
  for s in ddp zero1 zero2; do
    mpiexec -n "$p" --oversubscribe "$bench" --models="$wide" --optimizer=adamw --lr=1e-3 --steps=2 --warmup=1 \
      --iters=1 --strategies=$s --benchmark_out="$out/wide-$s-P$p.json" --benchmark_out_format=json \
      | tee "$out/wide-$s-P$p.txt"
  done
done
if [[ -x $venv/bin/python ]]; then
  peer=("$venv/bin/python" "$root/benchmarks/peers/torch_ddp.py" --data "$data")
  for z in "" --zero; do
    "${mpi[@]}" "${peer[@]}" --model mlp --max-steps $((mlp_steps + 5)) $z | tee -a "$out/torch.jsonl"
    "${mpi[@]}" "${peer[@]}" --model cnn --max-steps $((cnn_steps + 5)) $z | tee -a "$out/torch.jsonl"
    "${mpi[@]}" "${peer[@]}" --model mlp --hidden 4096,4096,4096,4096 --optimizer adamw --lr 1e-3 \
      --max-steps 3 --warmup-steps 1 $z | tee -a "$out/torch.jsonl"
  done
else
  echo "no PyTorch venv at $venv: peer skipped (HPCTRAIN_PEER_VENV)" | tee "$out/torch-skipped.txt"
fi
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/load.txt"
