#!/usr/bin/env bash
# A one-node Slurm cluster on localhost for tests and trials, without systemd.
#
#   scripts/slurm-local.sh up [STATE_DIR]     start slurmctld + slurmd, wait until the node is idle
#   scripts/slurm-local.sh down [STATE_DIR]   stop both daemons by PID and remove the state
#   scripts/slurm-local.sh env [STATE_DIR]    print `export SLURM_CONF=...` for clients
#
# Needs Debian's slurmctld slurmd slurm-client libpmix-dev (scripts/install-deps.sh) and root.
# Authentication is auth/none on 127.0.0.1 (no munge daemon); state, spool and logs live in
# STATE_DIR (default /tmp/hpctrain-slurm). The scheduler runs every 2 s and credentials expire
# after 10 s, so a requeued job restarts within seconds (defaults: minutes).
set -euo pipefail
cmd=${1:-}
dir=${2:-${HPCTRAIN_SLURM_DIR:-/tmp/hpctrain-slurm}}
conf=$dir/slurm.conf

die() { echo "slurm-local: $*" >&2; exit 1; }

alive() {  # a PID is alive unless gone or a zombie (daemons linger as zombies under PID 1)
  local pid=$1
  [[ -n $pid && -r /proc/$pid/status ]] || return 1
  ! grep -q '^State:.*Z' "/proc/$pid/status"
}

stop() {
  for name in slurmd slurmctld; do
    local pidfile=$dir/$name.pid
    [[ -f $pidfile ]] || continue
    local pid
    pid=$(cat "$pidfile")
    if alive "$pid"; then
      kill -TERM "$pid" 2> /dev/null || true
      for _ in $(seq 50); do alive "$pid" || break; sleep 0.1; done
      alive "$pid" && kill -KILL "$pid" 2> /dev/null || true
    fi
    rm -f "$pidfile"
  done
  # job steps started by this cluster's slurmd
  pkill -KILL -f "slurmstepd.*" 2> /dev/null || true
}

write_config() {
  local host node mem
  host=$(hostname -s)
  node=$(slurmd -C | head -1 | sed -e 's/^NodeName=[^ ]* //' -e 's/ *$//')
  mem=$(slurmd -C | head -1 | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p')
  node=$(echo "$node" | sed "s/RealMemory=[0-9]*/RealMemory=$((mem * 9 / 10))/")  # > 90% drains the node
  mkdir -p "$dir/state" "$dir/spool"
  cat > "$conf" << CONF
ClusterName=hpctrain-local
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
AuthInfo=cred_expire=10
MpiDefault=pmix
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
KillWait=5
MinJobAge=300
InactiveLimit=0
MailProg=/bin/true
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
NodeName=$host NodeAddr=127.0.0.1 $node State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
}

case $cmd in
  up)
    [[ $(id -u) -eq 0 ]] || die "must run as root (SlurmUser=root)"
    command -v slurmctld > /dev/null || die "slurmctld not installed (scripts/install-deps.sh)"
    stop
    rm -rf "$dir"
    mkdir -p "$dir"
    write_config
    export SLURM_CONF=$conf
    slurmctld -D -c -f "$conf" > "$dir/slurmctld.out" 2>&1 &
    echo $! > "$dir/slurmctld.pid"
    slurmd -D -f "$conf" > "$dir/slurmd.out" 2>&1 &
    echo $! > "$dir/slurmd.pid"
    for _ in $(seq 120); do
      if scontrol ping 2> /dev/null | grep -q UP && [[ $(sinfo -h -N -o %T 2> /dev/null) == idle* ]]; then
        echo "slurm-local: up (SLURM_CONF=$conf)"
        exit 0
      fi
      sleep 0.5
    done
    echo "slurm-local: the node did not become idle; logs:" >&2
    tail -20 "$dir"/slurmctld.log "$dir"/slurmd.log "$dir"/*.out >&2 || true
    stop
    exit 1
    ;;
  down)
    stop
    rm -rf "$dir"
    echo "slurm-local: down"
    ;;
  env)
    echo "export SLURM_CONF=$conf"
    ;;
  *)
    sed -n '2,12p' "$0"
    exit 2
    ;;
esac
