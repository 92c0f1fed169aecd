#!/usr/bin/env bash
# out_of_core.sh HPCTRAIN MPIEXEC WORKDIR
#
# Data larger than memory (docs/data.md): `hpctrain train` at np 2 streams a synthetic data set
# of >= 4x a memory cap through a cgroup (v1) memory limit that holds both ranks and mpirun,
# and must end normally (not OOM-killed), with every rank's peak RSS (VmHWM, the --metrics
# summary's peak_rss_bytes) under the cap; the same training with the data held in memory
# (--data-in-memory-mib) must give the same final parameters. Skipped (exit 77) where the
# cgroup v1 memory controller cannot be used (not root, cgroup v2 only).
set -u
hpctrain=$1 mpiexec=$2 workdir=$3
cap_mib=320
cg_root=/sys/fs/cgroup/memory
if [[ ! -w $cg_root || ! -e $cg_root/memory.limit_in_bytes ]]; then
  echo "SKIP: no writable cgroup v1 memory controller at $cg_root"
  exit 77
fi
work=$(mktemp -d "$workdir/out-of-core-XXXXXX")
group=$cg_root/hpctrain-out-of-core-$$
cleanup() {
  [[ -d $group ]] && rmdir "$group" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# float32 samples of 784 values: 3136 bytes each; 4.2x the cap.
samples=$(( cap_mib * 1048576 * 42 / 10 / 3136 ))
"$hpctrain" data synth --samples "$samples" --shape 1,28,28 --dtype float32 --seed 3 --out "$work/big.h5" || fail "data synth"
size=$(stat -c %s "$work/big.h5")
echo "data set: $samples samples, $size bytes; cap $cap_mib MiB"
(( size >= 4 * cap_mib * 1048576 )) || fail "the data set ($size bytes) is not 4x the cap"
sync; echo 1 > /proc/sys/vm/drop_caches 2>/dev/null || true

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
train=("$mpiexec" -n 2 --oversubscribe "$hpctrain" train --data "$work/big.h5" --model mlp --max-steps 60 --no-eval
       --global-batch 128 --seed 5)

mkdir "$group" || fail "cannot create cgroup $group"
echo $(( cap_mib * 1048576 )) > "$group/memory.limit_in_bytes" || fail "cannot set the memory limit"
# The subshell moves itself into the group, then becomes mpirun: both ranks start inside it.
out=$(timeout -k 5 300 sh -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' sh "$group" \
        "${train[@]}" --data-in-memory-mib 0 --metrics "$work/capped.jsonl" 2>&1)
rc=$?
printf '%s\n[exit %d]\n' "$out" "$rc"
oom_kills=$(awk '/^oom_kill /{print $2}' "$group/memory.oom_control")
max_usage=$(cat "$group/memory.max_usage_in_bytes")
echo "cgroup: max usage $max_usage bytes (page cache included), OOM kills ${oom_kills:-?}"
[[ $rc -eq 0 ]] || fail "the capped run exited $rc (OOM-killed under the $cap_mib MiB cap?)"
[[ ${oom_kills:-0} -eq 0 ]] || fail "the OOM killer ran in the group"
printf '%s\n' "$out" | grep -q "(${samples} samples)," || fail "the capped run did not stream from the file"
peak=$(tail -1 "$work/capped.jsonl" | sed -E 's/.*"peak_rss_bytes":([0-9]+).*/\1/')
echo "peak RSS of a rank: $peak bytes (cap $(( cap_mib * 1048576 )), data set $size)"
(( peak < cap_mib * 1048576 )) || fail "a rank's peak RSS $peak is not under the cap"
capped_sum=$(printf '%s\n' "$out" | grep -o 'final parameter checksum xxh3:[0-9a-f]*')
[[ -n $capped_sum ]] || fail "no checksum from the capped run"

# The same training with the whole data set in memory (no cap): the same parameters.
out=$(timeout -k 5 300 "${train[@]}" --data-in-memory-mib 4096 2>&1)
rc=$?
printf '%s\n[exit %d]\n' "$out" "$rc"
[[ $rc -eq 0 ]] || fail "the in-memory run exited $rc"
printf '%s\n' "$out" | grep -q "(${samples} samples, in memory)," || fail "the reference run did not hold the data in memory"
memory_sum=$(printf '%s\n' "$out" | grep -o 'final parameter checksum xxh3:[0-9a-f]*')
[[ $capped_sum == "$memory_sum" ]] || fail "streamed under the cap: $capped_sum; in memory: $memory_sum"
echo "PASS: streamed $size bytes under a $cap_mib MiB cap (peak RSS $peak); $capped_sum both ways"
