#!/usr/bin/env bash
# Load test of `hpctrain serve` on loopback with wrk (Debian package): requests/s and p50/p99
# latency at 1, 8 and 64 concurrent connections, each request one 784-float instance
# (scripts/load-test-serve.lua). See docs/serving.md.
#
#   scripts/load-test-serve.sh [--build DIR] [--out DIR] [--checkpoint CKPT] [--ranks 2]
#       [--connections "1 8 64"] [--duration 10] [--max-batch 64] [--max-wait-us 2000] [--url URL]
#
# Without --checkpoint a short MLP training (hpctrain train --max-steps 50) makes one in --out.
# The server is stopped with SIGTERM to its ranks at the end (exit 0 expected). Prints one
# Markdown table; wrk's JSON lines and the server log go to --out. With --url http://HOST:PORT
# no hpctrain server is started: the same load goes to that server (compare-ray-serve.sh).
set -euo pipefail
# Open MPI refuses to run as root unless told (these machines run as root).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$root/build
out=""
checkpoint=""
ranks=2
connections="1 8 64"
duration=10
max_batch=64
max_wait_us=2000
url=""
while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --checkpoint) checkpoint=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --connections) connections=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    --max-batch) max_batch=$2; shift 2 ;;
    --max-wait-us) max_wait_us=$2; shift 2 ;;
    --url) url=$2; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "load-test-serve: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
hpctrain=$build/bin/hpctrain
[[ -n $url || -x $hpctrain ]] || { echo "load-test-serve: $hpctrain not found: cmake --build $build --target hpctrain" >&2; exit 1; }
command -v wrk > /dev/null || { echo "load-test-serve: wrk not found (apt-get install wrk)" >&2; exit 1; }
out=${out:-$root/results/load-test-serve-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"
export OMPI_MCA_rmaps_base_oversubscribe=1

start_server() {
  if [[ -z $checkpoint ]]; then
    checkpoint=$out/ckpt
    mpirun -n 2 "$hpctrain" train --model mlp --max-steps 50 --no-eval --checkpoint-dir "$checkpoint" \
      --overwrite-checkpoints --log-every 0 --quiet
  fi
  mpirun -n "$ranks" "$hpctrain" serve --checkpoint "$checkpoint" --port 0 --max-batch "$max_batch" \
    --max-wait-us "$max_wait_us" > "$out/serve.log" 2>&1 &
  launcher=$!
  trap stop_server EXIT
  local port=""
  for _ in $(seq 600); do
    port=$(sed -n 's|.*serving .* on http://127.0.0.1:\([0-9]*\) with.*|\1|p' "$out/serve.log")
    [[ -n $port ]] && break
    kill -0 "$launcher" 2> /dev/null || { cat "$out/serve.log" >&2; exit 1; }
    sleep 0.1
  done
  [[ -n $port ]] || { echo "load-test-serve: serve did not start" >&2; exit 1; }
  curl -sf "http://127.0.0.1:$port/healthz" > /dev/null
  url=http://127.0.0.1:$port
}
stop_server() {
  for pid in $(pgrep -P "$launcher" || true); do kill -TERM "$pid" 2> /dev/null || true; done
  wait "$launcher" || echo "load-test-serve: serve exited $?" >&2
}
[[ -n $url ]] || start_server

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$out/load.txt"
for c in $connections; do
  threads=$((c < 2 ? c : 2))
  wrk -t "$threads" -c "$c" -d "${duration}s" --timeout 2s -s "$root/scripts/load-test-serve.lua" \
    "$url" | grep '^{' > "$out/wrk-c$c.json"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/load.txt"
[[ -z ${launcher:-} ]] || curl -sf "$url/metrics" > "$out/metrics.txt"

/usr/bin/python3 - "$out" "$connections" "${url:+$url}${launcher:+ (hpctrain serve, $ranks ranks)}" <<'PY'
import json, os, sys
out, conns, ranks = sys.argv[1], sys.argv[2].split(), sys.argv[3]
rows = [f"| connections | requests/s | p50 ms | p99 ms | timeouts | non-2xx | {ranks} |", "|---|---|---|---|---|---|---|"]
for c in conns:
    j = json.loads(open(os.path.join(out, f"wrk-c{c}.json")).read())
    rows.append(f"| {c} | {j['requests_per_s']:,.0f} | {j['p50_ms']:.2f} | {j['p99_ms']:.2f} | {j['timeouts']} | {j['non_2xx']} | |")
table = "\n".join(rows)
open(os.path.join(out, "table.md"), "w").write(table + "\n")
print(table)
PY
