#!/usr/bin/env bash
# cluster_test.sh SCENARIO [--options]: one test of the namespace cluster (label `cluster`,
# scripts/netns-cluster.sh, docs/cluster.md). Every rank count is 2 hosts x 2 ranks (ranks 0, 1
# on host 0; 2, 3 on host 1), launched by mpirun on host 0; every launch runs under `timeout`,
# so a hang fails the test instead of blocking ctest.
#
#   setup | cleanup            the fixture: bring the cluster up / take it down, checking that
#                              nothing is left behind
#   collectives_mpi | _ucx     the collectives matrix (a bounded subset) over the MPI transport /
#                              the UCX transport on tcp; hierarchical must span the hosts (the
#                              library sees 2 nodes) and the data must cross the fabric (its
#                              byte counters)
#   tune_collectives           hpctrain tune-collectives measures the inter-node link
#   train_resume               train + checkpoint across hosts, resume (at another rank count),
#                              same parameter checksum as an uninterrupted run
#   link_cut | link_cut_ucx    a host's fabric link goes down mid-collective (hierarchical over
#                              the MPI / UCX tcp transport): every rank ends within
#                              HPCTRAIN_COLL_TIMEOUT_S + margin, one names its unreachable peer
#
# Options: --netns-cluster PATH (scripts/netns-cluster.sh), --name NAME (the cluster's name,
# unique per build tree), --workdir DIR, --hpctrain PATH, --mpi-matrix PATH, --ucx-matrix PATH,
# --probe PATH, --fashion-mnist DIR.
#
# Not root, or no network namespaces: exit 77 (ctest SKIP_RETURN_CODE) with the reason. With
# CI=true a skip is a failure (exit 1): CI runs as root and must run these.
set -u
scenario=${1:?usage: cluster_test.sh SCENARIO [options]}
shift
netns="" name="" workdir="" hpctrain="" mpi_matrix="" ucx_matrix="" probe="" fmnist=""
while (($#)); do
  case $1 in
    --netns-cluster) netns=$2 ;;
    --name) name=$2 ;;
    --workdir) workdir=$2 ;;
    --hpctrain) hpctrain=$2 ;;
    --mpi-matrix) mpi_matrix=$2 ;;
    --ucx-matrix) ucx_matrix=$2 ;;
    --probe) probe=$2 ;;
    --fashion-mnist) fmnist=$2 ;;
    *) echo "cluster_test.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
  shift 2
done
[[ -x $netns && -n $name && -n $workdir ]] || { echo "cluster_test.sh: --netns-cluster, --name and --workdir are required" >&2; exit 2; }

fail() { echo "FAIL [cluster.$scenario]: $*" >&2; exit 1; }
skip() {
  if [[ ${CI:-} == true ]]; then
    echo "FAIL [cluster.$scenario]: would skip ($*), but CI=true: the cluster tests must run in CI (as root)" >&2
    exit 1
  fi
  echo "SKIP [cluster.$scenario]: $*"
  exit 77
}
cluster() { "$netns" "$1" --name "$name" "${@:2}"; }
hostns() { echo "$name-h$1"; }
fabric_bytes() { ip netns exec "$(hostns "$1")" cat /sys/class/net/fab0/statistics/rx_bytes; }

# The cluster, brought up if the fixture has not (idempotent: a no-op when it is up and healthy,
# rebuilt when a link is down); a skip when namespaces cannot be made here.
ensure_cluster() {
  [[ $(id -u) == 0 ]] || skip "not root: the cluster needs network namespaces and veth pairs"
  local out rc
  out=$(cluster up --hosts 2 --slots 2 2>&1)
  rc=$?
  [[ $rc == 77 ]] && skip "$out"
  [[ $rc == 0 ]] || fail "netns-cluster.sh up failed (exit $rc): $out"
}

# Kills what a test left running in the hosts (a launch killed by its timeout leaves orteds).
reap() {
  local i pids
  for i in 0 1; do
    pids=$(ip netns pids "$(hostns "$i")" 2>/dev/null) || continue
    # shellcheck disable=SC2086 # one pid per word
    [[ -n $pids ]] && kill -9 $pids 2>/dev/null
  done
  return 0
}

out="" rc=0
# on_cluster SECONDS CMD...: CMD on host 0 (mpirun there reaches host 1 through the rsh agent),
# killed after SECONDS; output in $out and the log, status in $rc.
on_cluster() {
  local limit=$1
  shift
  out=$(timeout -k 10 "$limit" "$netns" run --name "$name" -- "$@" 2>&1)
  rc=$?
  printf '$ %s\n%s\n[exit %d]\n' "$*" "$out" "$rc"
  if [[ $rc == 124 || $rc == 137 ]]; then
    reap
    fail "timed out after $limit s (a hang): $*"
  fi
}
expect_output() {  # REGEX [WHAT]: the last output (newlines as spaces) must match
  printf '%s\n' "$out" | tr '\n' ' ' | grep -Eq -- "$1" || fail "${2:-output} does not match /$1/"
}

mkdir -p "$workdir"

case $scenario in
  setup)
    ensure_cluster
    cluster status
    ;;

  cleanup)
    [[ $(id -u) == 0 ]] || skip "not root: there is no cluster to take down"
    reap
    cluster down || fail "netns-cluster.sh down failed"
    left=$(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$name-" | paste -sd' ')
    [[ -z $left ]] || fail "namespaces left behind: $left"
    [[ ! -e /run/hpctrain-cluster/$name ]] || fail "state left behind: /run/hpctrain-cluster/$name"
    ls -d /etc/netns/"$name"-* >/dev/null 2>&1 && fail "hosts files left behind: $(ls -d /etc/netns/"$name"-*)"
    echo "cluster '$name' is down, nothing left behind"
    ;;

  collectives_mpi | collectives_ucx)
    ensure_cluster
    trap reap EXIT
    if [[ $scenario == collectives_mpi ]]; then
      bin=$mpi_matrix transport=(env)
      # mpi (MPI_Allreduce) only here: the UCX transport has no vendor all-reduce.
      filter='AllAlgorithms/MpiAllreduce.MatchesMpiAllreduceAndReference/hierarchical*:*/ring:*/rabenseifner:*/tree_double_binary:*/mpi:MpiCollectives.ShmOnSeveralNodesFails:MpiCollectives.ShmStressBackToBack:MpiCollectives.NonBlockingReduceScatterAllgatherMatchMpi:Algorithms/MpiScatterGather.EveryFormMatchesMpiAndTheReference/hierarchical'
    else
      bin=$ucx_matrix transport=(env "UCX_TLS=tcp,self" UCX_WARN_UNUSED_ENV_VARS=n)
      filter='AllAlgorithms/MpiAllreduce.MatchesMpiAllreduceAndReference/hierarchical*:*/ring:*/rabenseifner:MpiCollectives.ShmOnSeveralNodesFails:MpiCollectives.ShmStressBackToBack:Algorithms/MpiScatterGather.EveryFormMatchesMpiAndTheReference/hierarchical'
    fi
    [[ -x $bin ]] || fail "test binary '$bin' not built"
    before=$(fabric_bytes 1)
    # 100003 elements at most (not 1 Mi + 3): TCP between oversubscribed hosts on 2 shared cores.
    on_cluster 150 "${transport[@]}" HPCTRAIN_TEST_MAX_COUNT=100003 mpirun -n 4 "$bin" --gtest_filter="$filter" --gtest_color=no
    [[ $rc == 0 ]] || fail "the matrix failed (exit $rc)"
    expect_output '\[  PASSED  \]' "the GoogleTest report"
    # Not skipped: the library itself found 2 nodes (MPI_COMM_TYPE_SHARED split by host), so
    # shm refused to span them and hierarchical ran its inter-node step between the hosts.
    expect_output '\[       OK \] MpiCollectives\.ShmOnSeveralNodesFails' "ShmOnSeveralNodesFails (ran, not skipped)"
    expect_output '\[       OK \] AllAlgorithms/MpiAllreduce\.MatchesMpiAllreduceAndReference/hierarchical ' "hierarchical"
    expect_output '\[       OK \] Algorithms/MpiScatterGather\.EveryFormMatchesMpiAndTheReference/hierarchical ' "hierarchical reduce-scatter / all-gather across the hosts"
    moved=$(($(fabric_bytes 1) - before))
    echo "host 1 received $moved bytes over its fabric link (fab0)"
    # The matrix moves far more than 8 MiB into host 1; a run whose data went another way
    # (shared memory between namespaces, loopback) would leave the counter near zero.
    ((moved > 8 * 1024 * 1024)) || fail "only $moved bytes crossed host 1's fabric link: the ranks did not talk over it"
    ;;

  tune_collectives)
    ensure_cluster
    trap reap EXIT
    [[ -x $hpctrain ]] || fail "hpctrain '$hpctrain' not built"
    rm -f "$workdir/tuning.json"
    on_cluster 150 env -u HPCTRAIN_TUNING_FILE -u HPCTRAIN_RANKS_PER_NODE mpirun -n 4 "$hpctrain" tune-collectives --quick --output "$workdir/tuning.json"
    [[ $rc == 0 ]] || fail "tune-collectives failed (exit $rc)"
    expect_output "4 ranks, 2 node\(s\), transport mpi" "the summary (real nodes, not virtual ones)"
    expect_output "alpha_inter +[0-9.]+ us per message +\(ping-pong 0<->2, $name-h0 <-> $name-h1\)" "the inter-node link line"
    /usr/bin/python3 - "$workdir/tuning.json" "$name" <<'EOF' || fail "the tuning file does not describe a measured inter-node link"
import json, math, sys
t = json.load(open(sys.argv[1]))
m, meta, name = t["model"], t["measured"], sys.argv[2]
def check(ok, what):
    if not ok:
        sys.exit(f"tuning file: {what}")
check(meta["nodes"] == 2 and not meta["virtual_nodes"], f"nodes {meta['nodes']}, virtual {meta['virtual_nodes']}")
check(meta["inter_pair"] == [0, 2] and meta["intra_pair"] == [0, 1], f"pairs {meta['intra_pair']} {meta['inter_pair']}")
check(meta.get("inter_hosts") == [f"{name}-h0", f"{name}-h1"], f"inter_hosts {meta.get('inter_hosts')}")
for k in ("alpha_inter_s", "beta_inter_s_per_byte", "alpha_intra_s", "beta_intra_s_per_byte"):
    check(math.isfinite(m[k]) and m[k] > 0, f"{k} = {m[k]}")
inter, intra = meta["half_round_trip_s"]["inter"], meta["half_round_trip_s"]["intra"]
check(inter and inter != intra, "no inter-node ping-pong points of its own")
print(f"inter-node (TCP between hosts): alpha {m['alpha_inter_s'] * 1e6:.1f} us, {1e-9 / m['beta_inter_s_per_byte']:.2f} GB/s; "
      f"intra-node: alpha {m['alpha_intra_s'] * 1e6:.2f} us, {1e-9 / m['beta_intra_s_per_byte']:.2f} GB/s")
EOF
    ;;

  train_resume)
    ensure_cluster
    trap reap EXIT
    [[ -x $hpctrain ]] || fail "hpctrain '$hpctrain' not built"
    [[ -f $fmnist/train-images-idx3-ubyte.gz ]] || fail "Fashion-MNIST not found in '$fmnist'"
    # The work dir is on the shared filesystem: every host sees the same checkpoint directory.
    rm -rf "$workdir/ck-full" "$workdir/ck"
    data=$workdir/train-512.h5
    [[ -f $data ]] || "$hpctrain" data import-idx --limit 512 --fashion-mnist \
      --images "$fmnist/train-images-idx3-ubyte.gz" --labels "$fmnist/train-labels-idx1-ubyte.gz" --out "$data" >/dev/null ||
      fail "importing the data failed"
    train=("$hpctrain" train --data "$data" --no-eval --global-batch 32 --log-every 0 --deterministic --checkpoint-every 2 --keep 3)
    checksum() { printf '%s\n' "$out" | grep -oE 'final parameter checksum xxh3:[0-9a-f]+' | tail -n1; }
    on_cluster 120 mpirun -n 4 "${train[@]}" --max-steps 8 --checkpoint-dir "$workdir/ck-full"
    [[ $rc == 0 ]] || fail "the uninterrupted run failed (exit $rc)"
    expect_output "4 ranks" "the uninterrupted run"
    reference=$(checksum)
    [[ -n $reference ]] || fail "the uninterrupted run printed no final parameter checksum"
    on_cluster 120 mpirun -n 4 "${train[@]}" --max-steps 4 --checkpoint-dir "$workdir/ck"
    [[ $rc == 0 && -d $workdir/ck/step-4 ]] || fail "the first half (steps 1-4) failed or wrote no step-4"
    shards=("$workdir"/ck/step-4/shard-*.h5)
    echo "step-4 holds ${#shards[@]} shards"
    # Resumed at 2 ranks, one per host (--map-by node): any P reads any P, and --deterministic
    # makes the bytes independent of P.
    on_cluster 120 mpirun -n 2 --map-by node "${train[@]}" --max-steps 8 --checkpoint-dir "$workdir/ck" --resume auto
    [[ $rc == 0 ]] || fail "the resumed run failed (exit $rc)"
    # Written by the 4 ranks of both hosts into the one directory they all see.
    expect_output "resumed from $workdir/ck/step-4 \(step 4, [^)]*written by 4 ranks\)" "the resume line"
    resumed=$(checksum)
    echo "uninterrupted: $reference; interrupted at step 4 and resumed at 2 ranks: $resumed"
    [[ $resumed == "$reference" ]] || fail "the resumed run's checksum ($resumed) differs from the uninterrupted run's ($reference)"
    ;;

  link_cut | link_cut_ucx)
    ensure_cluster
    [[ -x $probe ]] || fail "probe '$probe' not built"
    timeout_s=5
    # abort_job: rank 0 prints at once, other ranks after a 2 s grace; then MPI_Abort and the
    # launcher's teardown over the management network. 15 s covers that on loaded cores.
    margin_s=15
    log=$workdir/$scenario.log
    restore() { ip -n "$(hostns 1)" link set fab0 up 2>/dev/null; reap; }
    trap restore EXIT
    transport=(HPCTRAIN_TRANSPORT=mpi)
    [[ $scenario == link_cut_ucx ]] && transport=(HPCTRAIN_TRANSPORT=ucx "UCX_TLS=tcp,self" UCX_WARN_UNUSED_ENV_VARS=n)
    timeout -k 5 120 "$netns" run --name "$name" -- env HPCTRAIN_COLL_TIMEOUT_S=$timeout_s "${transport[@]}" \
      mpirun -n 4 "$probe" hierarchical 262144 90 > "$log" 2>&1 &
    job=$!
    for _ in $(seq 1 600); do grep -q 'link_cut_probe: running' "$log" && break; kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
    grep -q 'link_cut_probe: running' "$log" || { cat "$log"; fail "the probe did not start"; }
    sleep 1  # well inside the loop of all-reduces
    ip -n "$(hostns 1)" link set fab0 down || fail "could not take $(hostns 1)'s fab0 down"
    cut=$(date +%s.%N)
    echo "took $(hostns 1)'s fabric link (fab0) down at $(date -u +%T.%N)"
    wait "$job"
    rc=$?
    ended=$(date +%s.%N)
    cat "$log"
    elapsed=$(awk -v a="$cut" -v b="$ended" 'BEGIN { printf "%.1f", b - a }')
    echo "the job ended $elapsed s after the cut (exit $rc); limit $timeout_s + $margin_s s"
    [[ $rc == 124 || $rc == 137 ]] && fail "the job hung after the link cut (killed after 120 s)"
    [[ $rc != 0 ]] || fail "the job exited 0 after the link cut"
    grep -q '90 s of all-reduces without a failure' "$log" && fail "the collectives never noticed the cut"
    awk -v e="$elapsed" -v l=$((timeout_s + margin_s)) 'BEGIN { exit !(e <= l) }' ||
      fail "the job took $elapsed s to end after the cut, more than $timeout_s + $margin_s s"
    # A rank on one host names a peer on the other (host = rank / 2) as the one it waited for.
    named=$(grep -oE "rank [0-9]+: [^ ]+ .*did not complete within $timeout_s s \(HPCTRAIN_COLL_TIMEOUT_S\)[^;]*; still waiting for:.*" "$log" |
            awk '{ me = $2 + 0; for (i = 1; i < NF; i++) if ($i == "rank" && $(i+1) ~ /^[0-9]+/ && i > 2) { p = $(i+1) + 0; if (int(me / 2) != int(p / 2)) { print "rank " me " waited for rank " p; exit } } }')
    [[ -n $named ]] || fail "no diagnostic in which a rank names its unreachable peer on the other host"
    echo "diagnostic: $named (on the other host)"
    # Every rank process is gone from both hosts (nothing lingers once the job has ended).
    for _ in $(seq 1 50); do
      left=$( (ip netns pids "$(hostns 0)"; ip netns pids "$(hostns 1)") 2>/dev/null | paste -sd' ')
      [[ -z $left ]] && break
      sleep 0.1
    done
    [[ -z $left ]] || fail "processes still running on the hosts 5 s after the job ended: $(ps -o pid=,args= -p "${left// /,}")"
    ;;

  *) echo "cluster_test.sh: unknown scenario '$scenario'" >&2; exit 2 ;;
esac
echo "PASS [cluster.$scenario]"
