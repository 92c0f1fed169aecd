#!/usr/bin/env bash
# hierarchical vs the flat all-reduce algorithms across the hosts of the namespace cluster
# (scripts/netns-cluster.sh): bench_allreduce at 2 hosts x 2 ranks (ranks 0, 1 on host 0;
# 2, 3 on host 1), real TCP between the hosts, every algorithm in the same run. Writes the
# Google Benchmark JSON, the console table, `uptime` before and after (the machine's load), and
# a summary: per size, hierarchical's busbw against the best flat algorithm's. A benchmark, not a
# test; it holds /work/bench.lock (flock) while it measures, when that file's directory exists.
#
#   scripts/cluster-bench.sh [--build DIR] [--out DIR] [--name NAME] [--min-bytes 1M]
#       [--max-bytes 64M] [--iters 10] [--transports mpi[,ucx]]
#
# The cluster NAME (default $HPCTRAIN_CLUSTER_NAME or hpct) is brought up if it is not, and
# taken down again afterwards only in that case. See docs/cluster.md for measured figures.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$root/build
out=""
name=${HPCTRAIN_CLUSTER_NAME:-hpct}
min_bytes=1M
max_bytes=64M
iters=10
transports=mpi
while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --name) name=$2; shift 2 ;;
    --min-bytes) min_bytes=$2; shift 2 ;;
    --max-bytes) max_bytes=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --transports) transports=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "cluster-bench.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
bench=$build/bin/bench_allreduce
[[ -x $bench ]] || { echo "cluster-bench.sh: $bench not built (scripts/build.sh)" >&2; exit 1; }
out=${out:-$root/results/cluster-bench-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"
cluster=$root/scripts/netns-cluster.sh

took_up=0
if ! "$cluster" status --name "$name" >/dev/null 2>&1; then
  "$cluster" up --name "$name" --hosts 2 --slots 2
  took_up=1
fi
cleanup() { ((took_up)) && "$cluster" down --name "$name" >/dev/null; }
trap cleanup EXIT

lock=(flock /work/bench.lock)
[[ -d /work ]] || lock=()
algorithms=ring,tree,recursive_doubling,rabenseifner,hierarchical,auto,mpi
{ echo "before: $(uptime)"; } | tee "$out/uptime.txt"
# UCX over tcp only, on the fabric (UCX_NET_DEVICES from the cluster's env): never shared memory.
"${lock[@]}" "$cluster" run --name "$name" -- env UCX_TLS=tcp,self UCX_WARN_UNUSED_ENV_VARS=n \
  mpirun -n 4 "$bench" --min_bytes="$min_bytes" --max_bytes="$max_bytes" --iters="$iters" \
  --algorithms="$algorithms" --transports="$transports" \
  --benchmark_format=json --benchmark_out="$out/bench.json" --benchmark_out_format=json \
  2> "$out/table.txt" > /dev/null
{ echo "after:  $(uptime)"; } | tee -a "$out/uptime.txt"
cat "$out/table.txt"

/usr/bin/python3 - "$out/bench.json" <<'EOF' | tee "$out/summary.txt"
import collections, json, sys
FLAT = ("ring", "tree", "recursive_doubling", "rabenseifner")
rows = collections.defaultdict(dict)  # bytes -> column -> (busbw GB/s, median ms)
for b in json.load(open(sys.argv[1]))["benchmarks"]:
    rows[int(b["bytes"])][b["name"].split("/")[1]] = (b["busbw"], b["time_median_us"] / 1e3)
print("busbw in GB/s (median time in ms); ratio = hierarchical / best flat hpctrain algorithm")
print(f"{'size':>6} {'transport':>9} {'hierarchical':>15} {'best flat':>28} {'ratio':>6} {'auto':>15} {'MPI_Allreduce':>15}")
for n in sorted(rows):
    r = rows[n]
    for suffix in ("", "@ucx"):
        h = "hierarchical" + suffix
        if h not in r:
            continue
        flat = {a: r[a + suffix] for a in FLAT if a + suffix in r}
        best = max(flat, key=lambda a: flat[a][0])
        cell = lambda v: f"{v[0]:6.3f} ({v[1]:6.1f})" if v else f"{'-':>15}"
        print(f"{n >> 20:3d} Mi {suffix[1:] or 'mpi':>9} {cell(r[h])} {best:>18} {cell(flat[best])}"
              f" {r[h][0] / flat[best][0]:6.2f} {cell(r.get('auto' + suffix))} {cell(r.get('mpi'))}")
EOF
echo "cluster-bench.sh: results in $out"
