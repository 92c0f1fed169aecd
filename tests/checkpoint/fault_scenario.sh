#!/usr/bin/env bash
# fault_scenario.sh SCENARIO HPCTRAIN DATA MPIEXEC PYTHON
#
# One checkpoint fault through the real command, `mpirun -n 2 hpctrain train`: make two
# checkpoints (step-2, step-4), damage or interrupt the newest as SCENARIO says, expect the
# problem to be reported naming the file, the previous checkpoint to be intact, and
# `--resume auto` to resume from the newest good checkpoint and finish (step-6 verifies).
set -u
scenario=$1 hpctrain=$2 data=$3 mpiexec=$4 python=$5
work=$(mktemp -d /tmp/hpctrain-ckpt-fault-XXXXXX)
trap 'rm -rf "$work"' EXIT
ck=$work/ckpt
out=""  # output of the last command
rc=0

fail() { echo "FAIL [$scenario]: $*" >&2; exit 1; }
# run CMD...: captures output and status (printed for the log).
run() {
  out=$("$@" 2>&1)
  rc=$?
  printf '$ %s\n%s\n[exit %d]\n' "$*" "$out" "$rc"
}
expect_output() {  # REGEX: the last output (newlines as spaces) must match
  printf '%s\n' "$out" | tr '\n' ' ' | grep -Eq -- "$1" || fail "output does not match /$1/"
}
train() {
  "$mpiexec" -n 2 --oversubscribe "$hpctrain" train --data "$data" --no-eval --global-batch 32 --log-every 0 \
    --checkpoint-dir "$ck" --checkpoint-every 2 --keep 3 "$@"
}
inspect() { "$mpiexec" -n 1 "$hpctrain" ckpt inspect "$@"; }
expect_valid() {  # STEP_DIR
  run inspect "$1"
  [[ $rc -eq 0 ]] || fail "$1 does not verify"
  expect_output "all shard sizes and checksums verify"
}
expect_latest() { [[ "$(head -c 64 "$ck/latest")" == "$1" ]] || fail "latest is '$(head -c 64 "$ck/latest")', expected $1"; }
shard() { echo "$ck/step-4/shard-0000$1-of-00002.h5"; }

# Damage, then: `ckpt inspect` reports it (REGEX), and resume falls back to step-2.
damaged_then_resume() {  # REGEX [RESUME_STEP]
  run inspect "$ck/step-4"
  [[ $rc -ne 0 ]] || fail "ckpt inspect accepted the damaged step-4"
  expect_output "$1"
  resume_and_finish "$1" "${2:-2}"
}
resume_and_finish() {  # REGEX_OF_SKIP_MESSAGE RESUME_STEP
  run train --max-steps 6 --resume auto
  [[ $rc -eq 0 ]] || fail "resume failed"
  [[ -n "$1" ]] && expect_output "skipping checkpoint: .*$1"
  expect_output "resumed from $ck/step-$2 \(step $2,"
  expect_valid "$ck/step-6"
  expect_latest step-6
  [[ -z "$(ls -A "$ck" | grep '^\.step-')" ]] || fail "temporaries left behind: $(ls -A "$ck")"
}

if [[ $scenario != killed_mid_write && $scenario != disk_full ]]; then
  run train --max-steps 4
  [[ $rc -eq 0 ]] || fail "the first training run failed"
  expect_valid "$ck/step-2"
  expect_valid "$ck/step-4"
  expect_latest step-4
fi

case $scenario in
  killed_mid_write)
    # Rank 1 SIGKILLs itself after writing the first piece of its step-4 shard.
    run env HPCTRAIN_FAULT_KILL_DURING_CHECKPOINT=1:4 "$mpiexec" -n 2 --oversubscribe "$hpctrain" train \
      --data "$data" --no-eval --global-batch 32 --log-every 0 --checkpoint-dir "$ck" --checkpoint-every 2 \
      --keep 3 --max-steps 4
    [[ $rc -ne 0 ]] || fail "the killed run exited 0"
    [[ -f $ck/.step-4.tmp/shard-00001-of-00002.h5 ]] || fail "no partial shard: the kill did not happen mid-write"
    [[ ! -e $ck/step-4 ]] || fail "step-4 was committed although rank 1 died writing it"
    expect_latest step-2
    expect_valid "$ck/step-2"
    resume_and_finish "" 2
    ;;
  truncated_shard)
    truncate -s 5000 "$(shard 1)"
    damaged_then_resume "shard-00001-of-00002\.h5: size 5000 bytes, manifest says [0-9]+ \(truncated or torn\)"
    ;;
  bit_flip)
    # One bit in the middle of a dataset's data (not HDF5 metadata): only the checksum sees it.
    "$python" - "$(shard 0)" <<'PY' || fail "could not flip a bit"
import sys, h5py
path = sys.argv[1]
with h5py.File(path, "r") as f:
    name = []
    f.visititems(lambda n, o: name.append(n) if isinstance(o, h5py.Dataset) and o.size > 1000 else None)
    ds = f[name[0]]
    where = ds.id.get_offset() + ds.size * 2
print("flipping bit 3 of byte", where, "in", name[0])
with open(path, "r+b") as f:
    f.seek(where); b = f.read(1); f.seek(where); f.write(bytes([b[0] ^ 0x08]))
PY
    damaged_then_resume "shard-00000-of-00002\.h5: checksum mismatch .*data corrupted"
    ;;
  manifest_deleted)
    rm "$ck/step-4/manifest.json"
    damaged_then_resume "step-4/manifest\.json' is missing"
    ;;
  shard_missing)
    rm "$(shard 1)"
    damaged_then_resume "shard-00001-of-00002\.h5: shard missing"
    ;;
  latest_garbage)
    head -c 200 /dev/urandom > "$ck/latest"
    # Every checkpoint is good: the newest, step-4, is used; `latest` is reported.
    resume_and_finish "$ck/latest: points at '.*', which is not a step directory" 4
    ;;
  disk_full)
    run train --max-steps 2
    [[ $rc -eq 0 ]] || fail "the first training run failed"
    expect_valid "$ck/step-2"
    # The ranks' files may not exceed 1 MiB (a shard is ~2.1 MB): set in each rank, not for
    # mpirun, whose PMIx segments would hit it; no shared-memory transport and no shm
    # all-reduce, whose backing files would too.
    run env OMPI_MCA_btl=self,tcp HPCTRAIN_AUTO_ALGOS=ring,tree,recursive_doubling,rabenseifner "$mpiexec" -n 2 --oversubscribe bash -c 'ulimit -f 1024; exec "$@"' limit \
      "$hpctrain" train --data "$data" --no-eval --global-batch 32 --log-every 0 \
      --checkpoint-dir "$ck" --checkpoint-every 2 --keep 3 --max-steps 4 --resume auto
    [[ $rc -ne 0 ]] || fail "the run with a full disk exited 0"
    expect_output "checkpoint step-4 in '$ck' failed: .*shard-0000[01]-of-00002\.h5"
    expect_output "File too large"
    # Both ranks' messages whole (they were cut at 383 bytes each), printed once.
    expect_output "; rank 1: checkpoint shard '[^']*shard-00001-of-00002\.h5'.*File too large.*total write size = [0-9]+"
    [[ $(printf '%s\n' "$out" | grep -c '^hpctrain: error:') -eq 1 ]] || fail "the error was not printed exactly once"
    [[ ! -e $ck/step-4 && ! -e $ck/.step-4.tmp ]] || fail "a failed checkpoint left files: $(ls -A "$ck")"
    expect_latest step-2
    expect_valid "$ck/step-2"
    resume_and_finish "" 2
    ;;
  manifest_edited)
    # One changed digit in the resume point (next_batch 4 -> 6): only the manifest's own
    # checksum (format_version 2) sees it; resume takes step-2 instead of skipping batches.
    grep -q '"next_batch": 4,' "$ck/step-4/manifest.json" || fail "no next_batch 4 in step-4's manifest"
    sed -i 's/"next_batch": 4,/"next_batch": 6,/' "$ck/step-4/manifest.json"
    damaged_then_resume "step-4/manifest\.json: manifest checksum mismatch \(xxh3 [0-9a-f]{16}, manifest says [0-9a-f]{16}\): manifest modified or damaged"
    ;;
  manifest_version1)
    # A manifest of format_version 1 (no checksum of its own) still resumes, with a warning.
    "$python" - "$ck/step-4/manifest.json" <<'PY' || fail "could not edit the manifest"
import json, sys
m = json.load(open(sys.argv[1]))
m["format_version"] = 1
del m["manifest_xxh3"]
json.dump(m, open(sys.argv[1], "w"), indent=1)
PY
    run inspect "$ck/step-4"
    [[ $rc -eq 0 ]] || fail "ckpt inspect refused a version 1 manifest"
    expect_output "WARNING $ck/step-4: format_version 1 manifest has no checksum of its own"
    run train --max-steps 6 --resume auto
    [[ $rc -eq 0 ]] || fail "resume from a version 1 manifest failed"
    [[ $(printf '%s\n' "$out" | grep -c "hpctrain: warning: $ck/step-4: format_version 1 manifest has no checksum") -eq 1 ]] ||
      fail "expected one warning that step-4 is unprotected"
    expect_output "resumed from $ck/step-4 \(step 4,"
    expect_valid "$ck/step-6"
    ;;
  rewrite_interrupted)
    # A re-write of step-4 crashed between setting the old step-4 aside and renaming the new
    # one in: the next run (under its lock) renames the committed copy back and resumes from it.
    mv "$ck/step-4" "$ck/.step-4.old"
    mkdir "$ck/.step-4.tmp"
    run train --max-steps 6 --resume auto
    [[ $rc -eq 0 ]] || fail "resume failed"
    expect_output "hpctrain: warning: recovered '$ck/step-4' from its aside copy \(a re-write of that step was interrupted\)"
    expect_output "resumed from $ck/step-4 \(step 4,"
    expect_valid "$ck/step-6"
    [[ -z "$(ls -A "$ck" | grep '^\.step-')" ]] || fail "temporaries left behind: $(ls -A "$ck")"
    ;;
  manifest_absurd_shape)
    "$python" - "$ck/step-4/manifest.json" <<'PY' || fail "could not edit the manifest"
import json, sys
m = json.load(open(sys.argv[1]))
m["tensors"][0]["shape"] = [1 << 40, 1 << 40]
json.dump(m, open(sys.argv[1], "w"))
PY
    damaged_then_resume "step-4/manifest\.json: tensor 'params/[^']*' claims an absurd shape"
    ;;
  manifest_inflated)
    # Consistent on its face (pieces tile the shape), but claims 2^33 floats (32 GiB) in a
    # 2 MB shard. Rejected before anything is allocated: export runs under a 4 GiB
    # address-space limit, which an attempt to allocate would exceed (std::bad_alloc).
    "$python" - "$ck/step-4/manifest.json" <<'PY' || fail "could not edit the manifest"
import json, sys
m = json.load(open(sys.argv[1]))
t = m["tensors"][0]
t["shape"] = [1 << 33]
t["pieces"] = [{"shard": 0, "offset": 0, "count": 1 << 33}]
json.dump(m, open(sys.argv[1], "w"))
PY
    run bash -c 'ulimit -v 4194304; exec "$@"' limit "$mpiexec" -n 1 "$hpctrain" ckpt export "$ck/step-4" "$work/out.h5"
    [[ $rc -ne 0 ]] || fail "export of an inflated manifest succeeded"
    expect_output "shard-00000-of-00002\.h5' claim [0-9]{11} bytes of data, more than its recorded size"
    [[ ! -e $work/out.h5 ]] || fail "export left a file"
    damaged_then_resume "step-4/manifest\.json: tensor pieces in shard 'shard-00000-of-00002\.h5' claim"
    ;;
  *) fail "unknown scenario" ;;
esac
echo "PASS [$scenario]"
