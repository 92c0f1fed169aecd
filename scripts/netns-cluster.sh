#!/usr/bin/env bash
# A cluster of 2-4 "hosts" on one machine, each a network namespace with its own hostname, so
# Open MPI sees distinct nodes (MPI_COMM_TYPE_SHARED splits by host) and ranks on different
# hosts talk over real TCP through a bridge. Needs root and `ip netns`. See docs/cluster.md.
#
#   scripts/netns-cluster.sh up [--hosts N] [--slots K] [--name NAME]
#                                                           make the cluster (idempotent): N hosts
#                                                           (2-4, default 2) of K slots (default 2)
#   scripts/netns-cluster.sh down [--name NAME]             remove it, leaving nothing behind
#   scripts/netns-cluster.sh status [--name NAME]           hosts, addresses, link state; exit 1 if down
#   scripts/netns-cluster.sh env [--name NAME]              the exports that point mpirun at it
#   scripts/netns-cluster.sh run [--name NAME] [--host I] -- CMD...
#                                                           CMD on host I (default 0) with that env,
#                                                           e.g. -- mpirun -n 4 hostname
#   scripts/netns-cluster.sh rsh [--name NAME] HOST CMD...  the rsh agent mpirun calls (like ssh)
#
# Layout (NAME defaults to $HPCTRAIN_CLUSTER_NAME or "hpct"; several clusters with different
# names coexist, e.g. a test's and a user's):
#   NAME-br            one namespace holding two bridges, `fabric` and `mgmt`
#   NAME-h0 .. h<N-1>  one namespace per host, hostname NAME-h<i>, with
#                        fab0  10.77.0.(10+i)/24  the fabric: MPI/UCX data (btl_tcp_if_include)
#                        mgmt0 10.77.1.(10+i)/24  management: Open MPI's runtime (oob_tcp_if_include)
#                        lo up
# The addresses are private and exist only inside these namespaces (nothing in the root
# namespace changes), so they clash with nothing outside. Two networks as on a real cluster:
# cutting a host's fabric link (`ip -n NAME-h1 link set fab0 down`) leaves the launcher able
# to end the job, which is what the link-cut test checks.
#
# mpirun runs on host 0 (`run`); it starts the other hosts' orted through `rsh`, which enters
# the host's network namespace and a fresh UTS namespace with the host's name. State (hostfile,
# agent, env) lives in /run/hpctrain-cluster/NAME; /etc/netns/NAME-h<i>/hosts gives every host
# the cluster's names (ip netns exec bind-mounts it over /etc/hosts).
set -euo pipefail

self=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
name=${HPCTRAIN_CLUSTER_NAME:-hpct}
hosts=2
slots=2
host_index=0
fabric_prefix=10.77.0
mgmt_prefix=10.77.1

usage() { sed -n '2,/^set -euo/p' "$self" | sed '$d' | sed 's/^# \{0,1\}//'; }
die() { echo "netns-cluster.sh: $1" >&2; exit "${2:-1}"; }

cmd=${1:-}
[[ -n $cmd ]] || { usage >&2; exit 2; }
shift
case $cmd in -h|--help|help) usage; exit 0 ;; esac
while (($#)); do
  case $1 in
    --hosts) hosts=$2; shift 2 ;;
    --slots) slots=$2; shift 2 ;;
    --name) name=$2; shift 2 ;;
    --host) host_index=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    *) [[ $cmd == rsh ]] && break; die "unknown option '$1' (see --help)" 2 ;;
  esac
done
[[ $name =~ ^[a-z][a-z0-9]{0,7}$ ]] || die "--name '$name': 1-8 lower-case letters/digits, starting with a letter (it prefixes interface and namespace names)" 2

state=/run/hpctrain-cluster/$name
brns=$name-br
hostns() { echo "$name-h$1"; }
hostname_of() { echo "$name-h$1"; }

# The hosts of a running cluster (from its hostfile), or nothing.
running_hosts() { [[ -f $state/hosts ]] && cat "$state/hosts" || true; }

require_root() {
  [[ $(id -u) == 0 ]] || die "needs root (network namespaces, veth pairs); run as root" 77
  command -v ip >/dev/null || die "'ip' (iproute2) not found" 77
  command -v unshare >/dev/null || die "'unshare' (util-linux) not found" 77
}

# Checks the kernel lets us make a namespace; exits 77 (skip) with the reason otherwise.
probe() {
  local probe_ns=$name-probe$$ err
  if ! err=$(ip netns add "$probe_ns" 2>&1); then
    die "network namespaces unavailable: $err" 77
  fi
  ip netns del "$probe_ns" 2>/dev/null || true
}

cluster_down() {
  local ns
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}'); do
    case $ns in
      "$brns"|"$name"-h[0-9]) ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
                              ip netns del "$ns" ;;
    esac
  done
  rm -rf "$state" /etc/netns/"$name"-h[0-9]
  rmdir /run/hpctrain-cluster /etc/netns 2>/dev/null || true  # only when no other cluster uses them
}

cluster_up() {
  [[ $hosts =~ ^[2-4]$ ]] || die "--hosts $hosts: 2 to 4 hosts" 2
  require_root
  [[ $slots =~ ^[1-9][0-9]?$ ]] || die "--slots $slots: 1 to 99 ranks per host" 2
  if [[ -f $state/ready && $(wc -l < "$state/hosts") == "$hosts" ]] && grep -q "slots=$slots\$" "$state/hostfile" &&
     cluster_healthy; then
    echo "netns-cluster.sh: cluster '$name' with $hosts hosts is already up"
    return 0
  fi
  probe
  cluster_down  # a partial or differently sized earlier cluster
  mkdir -p "$state"
  trap 'echo "netns-cluster.sh: up failed; removing the partial cluster" >&2; cluster_down' EXIT
  ip netns add "$brns"
  ip -n "$brns" link set lo up
  local net
  for net in fabric mgmt; do
    ip -n "$brns" link add "$net" type bridge
    ip -n "$brns" link set "$net" up
  done
  local i ns
  : > "$state/hosts"
  for ((i = 0; i < hosts; i++)); do
    ns=$(hostns "$i")
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    # Made inside the namespaces, so no interface name ever exists in the root namespace.
    ip -n "$brns" link add "h$i-fab" type veth peer name fab0 netns "$ns"
    ip -n "$brns" link add "h$i-mgmt" type veth peer name mgmt0 netns "$ns"
    ip -n "$brns" link set "h$i-fab" master fabric up
    ip -n "$brns" link set "h$i-mgmt" master mgmt up
    ip -n "$ns" addr add "$fabric_prefix.$((10 + i))/24" dev fab0
    ip -n "$ns" addr add "$mgmt_prefix.$((10 + i))/24" dev mgmt0
    ip -n "$ns" link set fab0 up
    ip -n "$ns" link set mgmt0 up
    hostname_of "$i" >> "$state/hosts"
  done
  for ((i = 0; i < hosts; i++)); do
    mkdir -p "/etc/netns/$(hostns "$i")"
    {
      echo "127.0.0.1 localhost"
      local j
      for ((j = 0; j < hosts; j++)); do echo "$mgmt_prefix.$((10 + j)) $(hostname_of "$j")"; done
    } > "/etc/netns/$(hostns "$i")/hosts"
  done
  write_launch_files
  wait_for_links
  trap - EXIT
  touch "$state/ready"
  echo "netns-cluster.sh: cluster '$name' up: $hosts hosts $(paste -sd' ' "$state/hosts"), fabric $fabric_prefix.0/24, management $mgmt_prefix.0/24"
}

write_launch_files() {
  local h
  : > "$state/hostfile"
  # `mpirun -n P` fills host 0's slots first, then host 1's: consecutive ranks share a host. More
  # ranks than slots run oversubscribed (the hosts share the machine's cores anyway).
  for h in $(running_hosts); do echo "$h slots=$slots" >> "$state/hostfile"; done
  cat > "$state/rsh-agent" <<EOF
#!/bin/sh
# mpirun's rsh agent for cluster '$name' (made by netns-cluster.sh): runs the command in the host's namespace.
exec "$self" rsh --name "$name" "\$@"
EOF
  chmod +x "$state/rsh-agent"
  cat > "$state/env" <<EOF
export HPCTRAIN_CLUSTER_NAME=$name
export HPCTRAIN_CLUSTER_HOSTS="$(paste -sd' ' "$state/hosts")"
export OMPI_MCA_plm_rsh_agent=$state/rsh-agent
export OMPI_MCA_orte_default_hostfile=$state/hostfile
export OMPI_MCA_btl_tcp_if_include=$fabric_prefix.0/24
export OMPI_MCA_oob_tcp_if_include=$mgmt_prefix.0/24
export UCX_NET_DEVICES=fab0
export OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
EOF
}

# Whether host $1 reaches address $2: a TCP connect to the discard port is refused at once by a
# reachable host (ping is not installed on these machines) and times out otherwise.
reaches() {
  local out
  out=$(ip netns exec "$(hostns "$1")" timeout 1 bash -c "exec 3<>/dev/tcp/$2/9" 2>&1) && return 0
  [[ $out == *refused* ]]
}

# Every host reaches every other over both networks (the bridge ports take a moment to forward).
wait_for_links() {
  local i j deadline=$((SECONDS + 20))
  local n; n=$(wc -l < "$state/hosts")
  for ((i = 0; i < n; i++)); do
    for ((j = 0; j < n; j++)); do
      ((i == j)) && continue
      until reaches "$i" "$fabric_prefix.$((10 + j))" && reaches "$i" "$mgmt_prefix.$((10 + j))"; do
        ((SECONDS < deadline)) || die "host $i cannot reach host $j after 20 s"
        sleep 0.2
      done
    done
  done
}

cluster_healthy() {
  local i n; n=$(wc -l < "$state/hosts")
  ip netns list | awk '{print $1}' | grep -qx "$brns" || return 1
  for ((i = 0; i < n; i++)); do
    ip -n "$(hostns "$i")" -o link show fab0 2>/dev/null | grep -q 'state UP' || return 1
    ip -n "$(hostns "$i")" -o link show mgmt0 2>/dev/null | grep -q 'state UP' || return 1
  done
}

require_up() {
  [[ -f $state/ready ]] || die "cluster '$name' is not up (scripts/netns-cluster.sh up --name $name)"
}

# rsh HOST CMD...: like `ssh HOST CMD...`: the words joined and run by sh, on HOST.
cluster_rsh() {
  (($# >= 2)) || die "rsh: usage: rsh HOST CMD..." 2
  local host=$1 i=0 h
  shift
  for h in $(running_hosts); do
    if [[ $h == "$host" ]]; then
      exec ip netns exec "$(hostns "$i")" unshare --uts sh -c 'hostname "$1" && exec sh -c "$2"' rsh "$host" "$*"
    fi
    i=$((i + 1))
  done
  die "rsh: '$host' is not a host of cluster '$name' ($(running_hosts | paste -sd' '))"
}

cluster_run() {
  require_up
  (($#)) || die "run: no command (run [--host I] -- CMD...)" 2
  local n; n=$(wc -l < "$state/hosts")
  [[ $host_index =~ ^[0-9]+$ ]] && ((host_index < n)) || die "--host $host_index: the cluster has hosts 0..$((n - 1))" 2
  # shellcheck disable=SC1091
  . "$state/env"
  exec ip netns exec "$(hostns "$host_index")" unshare --uts \
    sh -c 'hostname "$1" && shift && exec "$@"' run "$(hostname_of "$host_index")" "$@"
}

cluster_status() {
  if [[ ! -f $state/ready ]]; then echo "cluster '$name': down"; return 1; fi
  local i=0 h
  echo "cluster '$name': up, state in $state"
  for h in $(running_hosts); do
    printf '  %-10s namespace %-10s %s\n' "$h" "$(hostns "$i")" \
      "$(ip -n "$(hostns "$i")" -br addr show 2>/dev/null | awk '$1 != "lo" {sub(/@.*/, "", $1); printf "%s %s %s  ", $1, $2, $3}')"
    i=$((i + 1))
  done
  cluster_healthy || { echo "  (some link is down)"; return 1; }
}

case $cmd in
  up) cluster_up ;;
  down) require_root; cluster_down; echo "netns-cluster.sh: cluster '$name' down" ;;
  status) cluster_status ;;
  env) require_up; cat "$state/env" ;;
  run) cluster_run "$@" ;;
  rsh) cluster_rsh "$@" ;;
  *) die "unknown command '$cmd' (up, down, status, env, run, rsh; see --help)" 2 ;;
esac
