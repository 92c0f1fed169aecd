#!/usr/bin/env bash
# `hpctrain serve` vs Ray Serve 2.60 (PyPI) serving the same MLP (784-512-256-10) with PyTorch on
# the same cores, driven by the same wrk load (scripts/load-test-serve.lua: one 784-float instance
# per request) at 1, 8 and 64 connections, back to back. See docs/serving.md.
#
#   scripts/compare-ray-serve.sh [--build DIR] [--out DIR] [--duration 10] [--connections "1 8 64"]
#
# Ray side: benchmarks/peers/ray_serve_mlp.py, 2 replicas of 1 CPU, @serve.batch max 64 / 2 ms,
# from its own venv at $HPCTRAIN_RAY_VENV (default $build/ray-venv; ray[serve]==2.60.0 and
# torch==2.15.0 pip-installed on first use, minutes). hpctrain side: scripts/load-test-serve.sh
# at 2 ranks, --max-batch 64 --max-wait-us 2000. Prints one Markdown table with the ratios.
set -euo pipefail
# Open MPI refuses to run as root unless told (these machines run as root).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$root/build
out=""
duration=10
connections="1 8 64"
while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    --connections) connections=$2; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "compare-ray-serve: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
out=${out:-$root/results/compare-ray-serve-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out/hpctrain" "$out/ray"

venv=${HPCTRAIN_RAY_VENV:-$build/ray-venv}
python=$venv/bin/python
if ! "$python" -c "import ray, torch, h5py; assert ray.__version__.startswith('2.60') and torch.__version__.startswith('2.15')" 2>/dev/null; then
  echo "compare-ray-serve: installing ray[serve]==2.60.0, torch==2.15.0 and h5py (torch_ddp.py imports it) from PyPI into $venv (once; minutes)" >&2
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "ray[serve]==2.60.0" torch==2.15.0 h5py numpy
fi

"$root/scripts/load-test-serve.sh" --build "$build" --out "$out/hpctrain" --duration "$duration" \
  --connections "$connections" --ranks 2 --max-batch 64 --max-wait-us 2000

port=$("$python" -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
RAY_USAGE_STATS_ENABLED=0 "$python" "$root/benchmarks/peers/ray_serve_mlp.py" --port "$port" > "$out/ray/serve.log" 2>&1 &
ray_pid=$!
stop_ray() {
  kill -TERM "$ray_pid" 2> /dev/null || true
  for _ in $(seq 300); do kill -0 "$ray_pid" 2> /dev/null || break; sleep 0.1; done
  kill -KILL "$ray_pid" 2> /dev/null || true
  "$venv/bin/ray" stop --force > /dev/null 2>&1 || true
}
trap stop_ray EXIT
for _ in $(seq 1200); do
  grep -q "ray serve: ready" "$out/ray/serve.log" && break
  kill -0 "$ray_pid" 2> /dev/null || { cat "$out/ray/serve.log" >&2; exit 1; }
  sleep 0.1
done
grep -q "ray serve: ready" "$out/ray/serve.log" || { echo "compare-ray-serve: Ray Serve did not start" >&2; exit 1; }
"$root/scripts/load-test-serve.sh" --url "http://127.0.0.1:$port" --out "$out/ray" --duration "$duration" \
  --connections "$connections"

/usr/bin/python3 - "$out" "$connections" <<'PY'
import json, os, sys
out, conns = sys.argv[1], sys.argv[2].split()
rows = ["| connections | hpctrain req/s | Ray Serve req/s | ratio | hpctrain p50 / p99 ms | Ray p50 / p99 ms | p99 ratio | timeouts hpctrain / Ray |",
        "|---|---|---|---|---|---|---|---|"]
for c in conns:
    h = json.load(open(os.path.join(out, "hpctrain", f"wrk-c{c}.json")))
    r = json.load(open(os.path.join(out, "ray", f"wrk-c{c}.json")))
    rows.append(f"| {c} | {h['requests_per_s']:,.0f} | {r['requests_per_s']:,.0f} | {h['requests_per_s'] / max(r['requests_per_s'], 1e-9):.1f}x | "
                f"{h['p50_ms']:.2f} / {h['p99_ms']:.2f} | {r['p50_ms']:.1f} / {r['p99_ms']:.1f} | {r['p99_ms'] / max(h['p99_ms'], 1e-9):.1f}x lower | "
                f"{h['timeouts']} / {r['timeouts']} |")
table = "\n".join(rows)
open(os.path.join(out, "table.md"), "w").write(table + "\n")
print(table)
PY
