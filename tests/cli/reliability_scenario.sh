#!/usr/bin/env bash
# reliability_scenario.sh SCENARIO HPCTRAIN DATA MPIEXEC [PYTHON]
#
# One failure through the real command, `mpirun -n 2 hpctrain train`: a failure on some ranks,
# or a rank frozen with SIGSTOP, must end every rank within a stated bound (no hang), exit
# non-zero, and print the original cause once, naming the rank. Each run is under `timeout`,
# so a regression to a hang fails in seconds, not at ctest's TIMEOUT.
set -u
scenario=$1 hpctrain=$2 data=$3 mpiexec=$4 python=${5:-/usr/bin/python3}
work=$(mktemp -d /tmp/hpctrain-reliability-XXXXXX)
trap 'rm -rf "$work"' EXIT
out="" rc=0

fail() { echo "FAIL [$scenario]: $*" >&2; exit 1; }
# run BOUND_S CMD...: output and status of CMD, killed after BOUND_S seconds (rc 124: a hang).
run() {
  local bound=$1
  shift
  out=$(timeout -k 5 "$bound" "$@" 2>&1)
  rc=$?
  printf '$ %s\n%s\n[exit %d]\n' "$*" "$out" "$rc"
  [[ $rc -ne 124 && $rc -ne 137 ]] || fail "did not end within $bound s (a hang)"
}
expect_output() {  # REGEX: the last output (newlines as spaces) must match
  printf '%s\n' "$out" | tr '\n' ' ' | grep -Eq -- "$1" || fail "output does not match /$1/"
}
# The cause is printed exactly once (one `hpctrain: error:` line, matching REGEX), never with
# the rank named twice.
expect_one_error() {  # REGEX
  local n
  n=$(printf '%s\n' "$out" | grep -c '^hpctrain: error:')
  [[ $n -eq 1 ]] || fail "expected one 'hpctrain: error:' line, got $n"
  printf '%s\n' "$out" | grep '^hpctrain: error:' | grep -Eq -- "$1" || fail "the error line does not match /$1/"
  ! printf '%s\n' "$out" | grep -Eq 'rank [0-9]+: rank [0-9]+:' || fail "the rank is named twice"
}
train=("$mpiexec" -n 2 --oversubscribe "$hpctrain" train --data "$data" --no-eval --global-batch 32)
# Every checkpoint committed under DIR (h5py) holds finite numbers only, and there is one.
expect_finite_checkpoints() {  # DIR
  "$python" - "$1" <<'PY' || fail "no checkpoint, or a committed checkpoint holds non-finite numbers"
import glob, sys, h5py, numpy as np
shards = glob.glob(sys.argv[1] + "/step-*/shard-*.h5")
assert shards, "no checkpoint was committed"
for path in shards:
    with h5py.File(path, "r") as f:
        bad = []
        f.visititems(lambda n, o: bad.append(n) if isinstance(o, h5py.Dataset) and not np.isfinite(o[()]).all() else None)
        assert not bad, f"{path}: non-finite {bad}"
print(f"{len(shards)} shards, all finite")
PY
}

# Sends SIGNAL (default STOP) to rank RANK of the run started with HPCTRAIN_TEST_RUN=$work once
# it has printed a progress line into LOG (a stopped rank is SIGKILLed by the job's abort).
stop_rank_after_progress() {  # LOG RANK [SIGNAL]
  local log=$1 rank=$2 signal=${3:-STOP} env_file pid
  for _ in $(seq 1 600); do
    grep -q 'step ' "$log" 2>/dev/null && break
    sleep 0.1
  done
  for env_file in /proc/[0-9]*/environ; do
    [[ -r $env_file ]] || continue
    pid=${env_file#/proc/}
    pid=${pid%/environ}
    if tr '\0' '\n' 2>/dev/null < "$env_file" | grep -qx "HPCTRAIN_TEST_RUN=$work" 2>/dev/null &&
       tr '\0' '\n' 2>/dev/null < "$env_file" | grep -qx "OMPI_COMM_WORLD_RANK=$rank"; then
      kill "-$signal" "$pid" && echo "sent SIG$signal to rank $rank (pid $pid)" && return 0
    fi
  done
  return 1
}
# A run in which rank 1 is frozen mid-training; every other rank must name it and end.
frozen_rank() {  # EXTRA_TRAIN_ARGS...
  local log=$work/frozen.log start end
  start=$(date +%s)
  HPCTRAIN_TEST_RUN=$work HPCTRAIN_COLL_TIMEOUT_S=5 timeout -k 5 60 "$mpiexec" -n 2 --oversubscribe "$hpctrain" train --data "$data" \
    --no-eval --global-batch 32 --epochs 1000 --log-every 1 "$@" > "$log" 2>&1 &
  local mpirun=$!
  stop_rank_after_progress "$log" 1 || { kill -KILL "$mpirun"; fail "could not find rank 1 to stop"; }
  wait "$mpirun"
  rc=$?
  end=$(date +%s)
  out=$(cat "$log")
  printf '%s\n[exit %d after %d s]\n' "$(tail -n 30 "$log")" "$rc" "$((end - start))"
  [[ $rc -ne 124 && $rc -ne 137 ]] || fail "the job did not end within 60 s of a frozen rank (a hang)"
  [[ $rc -ne 0 ]] || fail "exited 0 with a frozen rank"
}

case $scenario in
  metrics_unwritable | metrics_unwritable_mpi)
    # Rank 0 cannot open its metrics file; rank 1 has nothing to write and goes on. Before the
    # fix, rank 0 blocked in MPI_Win_free (or rank 1 in MPI_Allreduce) forever, printing nothing.
    algo=auto
    [[ $scenario == metrics_unwritable_mpi ]] && algo=mpi
    run 60 "${train[@]}" --max-steps 5 --algo "$algo" --metrics /nonexistent/x.jsonl
    [[ $rc -eq 1 ]] || fail "exit status $rc, expected 1"
    expect_one_error "^hpctrain: error: rank 0: --metrics: cannot write '/nonexistent/x\.jsonl'"
    ;;
  frozen_rank | frozen_rank_mpi)
    # Rank 1 frozen (SIGSTOP) mid-training: rank 0 names it within HPCTRAIN_COLL_TIMEOUT_S=5
    # (our algorithms' deadline, or the vendor-call watchdog for MPI_Allreduce) and the job ends.
    if [[ $scenario == frozen_rank ]]; then frozen_rank; else frozen_rank --algo mpi; fi
    expect_one_error "^hpctrain: error: rank 0: .*did not complete within 5 s.*waiting.*rank 1"
    ;;
  nonfinite_loss)
    # --lr 1e6 diverges within a few steps: the run stops naming the step, exit 1, and every
    # checkpoint it committed (one per step) holds finite numbers only.
    run 60 "${train[@]}" --lr 1e6 --max-steps 20 --log-every 1 --checkpoint-dir "$work/ck" --checkpoint-every 1
    [[ $rc -eq 1 ]] || fail "exit status $rc, expected 1"
    expect_one_error "^hpctrain: error: rank 0: step [0-9]+: the training loss is not finite on rank [01]( \(-?nan\)| \(-?inf\))?; stopped before applying the step"
    expect_finite_checkpoints "$work/ck"
    ;;
  nan_sample | nan_scale)
    # A float32 data set with NaN in some samples, or a NaN `scale` attribute: refused naming
    # the file and dataset (and the sample and element), exit 1.
    bad=$work/bad.h5
    "$python" - "$data" "$bad" "$scenario" <<'PY' || fail "could not make the bad data set"
import shutil, sys, h5py, numpy as np
src, dst, scenario = sys.argv[1:]
shutil.copy(src, dst)
with h5py.File(dst, "r+") as f:
    x = f["samples"][()].astype(np.float32) / 255.0
    attrs = dict(f["samples"].attrs)
    del f["samples"]
    if scenario == "nan_sample":
        x.reshape(len(x), -1)[::8, 89] = np.nan  # every 8th sample: every batch holds some
    ds = f.create_dataset("samples", data=x)
    for k, v in attrs.items():
        if k != "scale":
            ds.attrs[k] = v
    ds.attrs["scale"] = np.nan if scenario == "nan_scale" else 1.0
PY
    run 60 "$mpiexec" -n 2 --oversubscribe "$hpctrain" train --data "$bad" --no-eval --global-batch 32 --max-steps 2
    [[ $rc -eq 1 ]] || fail "exit status $rc, expected 1"
    if [[ $scenario == nan_sample ]]; then
      expect_one_error "^hpctrain: error: rank [01]: data set '$bad' /samples: sample [0-9]+ holds nan at element 89: the input must be finite"
    else
      expect_one_error "^hpctrain: error: rank 0: data set '$bad' /samples: attribute 'scale' is nan, not a finite number"
    fi
    ;;
  nonfinite_skip)
    # One poisoned sample (every element 3e38, finite but overflowing the first layer) makes one
    # step per epoch non-finite. Without --skip-nonfinite-steps the run stops naming that step S;
    # with it the step is skipped and counted, the run ends with finite parameters, and
    # --deterministic keeps the same bytes at np 1, 3 and with zero1 (np 2). The skipped step
    # applied nothing: S steps with the skip end on the bytes of S - 1 steps without it.
    bad=$work/poisoned.h5
    "$python" - "$data" "$bad" <<'PY' || fail "could not make the poisoned data set"
import shutil, sys, h5py, numpy as np
src, dst = sys.argv[1:]
shutil.copy(src, dst)
with h5py.File(dst, "r+") as f:
    x = f["samples"][()].astype(np.float32) / 255.0
    attrs = dict(f["samples"].attrs)
    del f["samples"]
    x[100] = 3e38
    ds = f.create_dataset("samples", data=x)
    for k, v in attrs.items():
        if k != "scale":
            ds.attrs[k] = v
    ds.attrs["scale"] = 1.0
PY
    # Which of the two checks fires depends on the kernels (here: a finite loss, an infinite
    # gradient); either stops the step.
    cause="(the training loss is not finite|the summed gradient holds a NaN or an infinity)"
    det=(--data "$bad" --no-eval --global-batch 32 --deterministic --log-every 4)
    checksum() { printf '%s\n' "$out" | grep -o 'final parameter checksum xxh3:[0-9a-f]*' | cut -d: -f2; }
    run 60 "$mpiexec" -n 2 --oversubscribe "$hpctrain" train "${det[@]}" --epochs 1
    [[ $rc -eq 1 ]] || fail "exit status $rc, expected 1 without --skip-nonfinite-steps"
    expect_one_error "^hpctrain: error: rank 0: step [0-9]+: $cause on rank [01].*stopped before applying the step.*--skip-nonfinite-steps"
    step=$(printf '%s\n' "$out" | grep '^hpctrain: error:' | sed -E 's/.*: step ([0-9]+): .*/\1/')
    [[ $step -ge 2 ]] || fail "the poisoned step is step $step: the checks below need one before it"
    run 60 "$mpiexec" -n 1 "$hpctrain" train "${det[@]}" --epochs 1 --skip-nonfinite-steps 1 --metrics "$work/m1.jsonl" \
      --checkpoint-dir "$work/ck" --checkpoint-every 4
    [[ $rc -eq 0 ]] || fail "exit status $rc with --skip-nonfinite-steps 1"
    expect_output "hpctrain: warning: step $step: $cause on rank 0( \((-?nan|-?inf)\)| \(the loss is finite\))?; step skipped \(1 of at most 1"
    expect_output "skipped 1 non-finite step"
    np1=$(checksum)
    "$python" - "$work/m1.jsonl" "$step" <<'PY' || fail "the metrics do not record the skipped step"
import json, sys
records = [json.loads(l) for l in open(sys.argv[1])]
skipped = [r for r in records if r["type"] == "skipped_step"]
assert [r["step"] for r in skipped] == [int(sys.argv[2])], skipped
assert records[-1]["type"] == "summary" and records[-1]["skipped_steps"] == 1, records[-1]
print(f"skipped step {skipped[0]['step']} recorded")
PY
    expect_finite_checkpoints "$work/ck"
    run 90 "$mpiexec" -n 3 --oversubscribe "$hpctrain" train "${det[@]}" --epochs 1 --skip-nonfinite-steps 1
    [[ $rc -eq 0 && $(checksum) == "$np1" ]] || fail "np 3 ($(checksum)) differs from np 1 ($np1)"
    run 60 "$mpiexec" -n 2 --oversubscribe "$hpctrain" train "${det[@]}" --epochs 1 --skip-nonfinite-steps 1 --strategy zero1
    [[ $rc -eq 0 && $(checksum) == "$np1" ]] || fail "zero1 at np 2 ($(checksum)) differs from ddp at np 1 ($np1)"
    run 60 "$mpiexec" -n 2 --oversubscribe "$hpctrain" train "${det[@]}" --epochs 1 --max-steps $((step - 1))
    before=$(checksum)
    run 60 "$mpiexec" -n 2 --oversubscribe "$hpctrain" train "${det[@]}" --epochs 1 --max-steps "$step" --skip-nonfinite-steps 1
    [[ $rc -eq 0 && -n $before && $(checksum) == "$before" ]] ||
      fail "the skipped step changed the parameters ($(checksum) after it, $before before it)"
    # Two epochs hold the poisoned sample twice: one skip allowed, the second stops the run.
    run 90 "$mpiexec" -n 2 --oversubscribe "$hpctrain" train "${det[@]}" --epochs 2 --skip-nonfinite-steps 1
    [[ $rc -eq 1 ]] || fail "exit status $rc, expected 1 at the second non-finite step"
    expect_one_error "^hpctrain: error: rank 0: step [0-9]+: $cause .*--skip-nonfinite-steps 1 skipped 1 already"
    ;;
  checkpoint_dir_in_use)
    # Run A trains into ck; run B, started meanwhile on ck, is refused naming A's lock; A's
    # rank 0 is then SIGKILLed (its lock stays behind), and run C takes the stale lock over.
    ck=$work/ck log=$work/a.log
    # Run A's own limit is generous (it is SIGKILLed below): on a loaded machine its start-up
    # alone can take tens of seconds, and A must still hold its lock when B starts.
    HPCTRAIN_TEST_RUN=$work timeout -k 5 240 "${train[@]}" --epochs 1000 --log-every 1 --checkpoint-dir "$ck" \
      --checkpoint-every 2 > "$log" 2>&1 &
    a=$!
    # Its first commit ('latest' exists; step-2 itself may already be pruned by --keep).
    for _ in $(seq 1 1800); do [[ -e $ck/latest ]] && break; sleep 0.1; done
    [[ -f $ck/.hpctrain.lock ]] || { kill -KILL "$a"; tail -n 20 "$log"; fail "run A holds no lock"; }
    run 60 "${train[@]}" --max-steps 4 --checkpoint-dir "$ck" --resume auto
    [[ $rc -eq 1 ]] || { kill -KILL "$a"; fail "run B: exit status $rc, expected 1"; }
    expect_one_error "^hpctrain: error: rank 0: checkpoint directory '$ck' is in use by another run: its lock '$ck/\.hpctrain\.lock' is held by pid [0-9]+ on host $(hostname)\. Use another --checkpoint-dir"
    stop_rank_after_progress "$log" 0 KILL || { kill -KILL "$a"; fail "could not find run A's rank 0"; }
    wait "$a"
    [[ -f $ck/.hpctrain.lock ]] || fail "the SIGKILLed run left no lock (nothing stale to take over)"
    run 60 "${train[@]}" --max-steps 4 --checkpoint-dir "$ck" --resume auto
    [[ $rc -eq 0 ]] || fail "run C: exit status $rc, expected 0"
    expect_output "hpctrain: warning: taking over the stale lock '$ck/\.hpctrain\.lock' of pid [0-9]+ on host $(hostname): pid [0-9]+ no longer runs on this host"
    [[ ! -e $ck/.hpctrain.lock ]] || fail "run C did not release its lock"
    ;;
  fresh_run_in_used_dir)
    # A run without --resume refuses a directory holding another run's checkpoints, unless
    # --overwrite-checkpoints (which removes them first). An error ending a run releases the lock.
    ck=$work/ck
    run 60 "${train[@]}" --max-steps 2 --checkpoint-dir "$ck" --checkpoint-every 2
    [[ $rc -eq 0 && -d $ck/step-2 ]] || fail "the first run failed"
    run 60 "${train[@]}" --max-steps 2 --checkpoint-dir "$ck" --checkpoint-every 2
    [[ $rc -eq 1 ]] || fail "exit status $rc, expected 1"
    expect_one_error "^hpctrain: error: rank 0: --checkpoint-dir '$ck' already holds checkpoints \(latest, step-2\) and this run does not resume: pass --resume auto to continue from them, or --overwrite-checkpoints to remove them and start afresh"
    [[ ! -e $ck/.hpctrain.lock ]] || fail "the refused run left its lock behind"
    run 60 "${train[@]}" --max-steps 1 --checkpoint-dir "$ck" --overwrite-checkpoints
    [[ $rc -eq 0 ]] || fail "--overwrite-checkpoints: exit status $rc, expected 0"
    expect_output "hpctrain: --overwrite-checkpoints: removed 2 checkpoint entries of an earlier run from '$ck'"
    [[ -d $ck/step-1 && ! -e $ck/step-2 && "$(cat "$ck/latest")" == step-1 ]] || fail "not started afresh: $(ls -A "$ck")"
    ;;
  data_truncated | data_rewritten | data_replaced)
    # The data file changes under a running job (a copy of the data set, so the fixture stays
    # intact): truncated, rewritten in place by dd (same bytes, new modification time), or
    # replaced by another file with mv. Before the fix the run went on reading zeros (or the
    # old inode) and exited 0; now the next batch read names the file and the change, once,
    # and every rank exits 1. The run streams from the file (--data-in-memory-mib 0): a training
    # split held in memory is read once at the start, so a later change cannot reach it.
    copy=$work/data.h5 log=$work/change.log
    cp "$data" "$copy"
    start=$(date +%s)
    HPCTRAIN_TEST_RUN=$work timeout -k 5 120 "$mpiexec" -n 2 --oversubscribe "$hpctrain" train --data "$copy" \
      --no-eval --global-batch 32 --epochs 1000 --log-every 1 --data-in-memory-mib 0 > "$log" 2> "$work/change.err" &
    job=$!
    for _ in $(seq 1 1200); do grep -q 'step ' "$log" 2>/dev/null && break; sleep 0.1; done
    grep -q 'step ' "$log" || { kill -KILL "$job"; cat "$log"; fail "the run printed no progress"; }
    case $scenario in
      data_truncated) truncate -s 5000 "$copy"; what="size [0-9]+ -> 5000 bytes \(truncated\)" ;;
      # dd conv=notrunc rewrites the bytes in place without the truncation cp does first: with
      # cp a batch read between its truncate and its write saw the size change (a different,
      # also correct, message) and the check on the modification-time message failed (CI, stop 27).
      data_rewritten) sleep 0.05; dd if="$data" of="$copy" conv=notrunc status=none; what="modification time .* -> " ;;
      data_replaced) cp "$data" "$work/other.h5"; mv "$work/other.h5" "$copy"; what="it is another file now \(device:inode [0-9]+:[0-9]+ -> [0-9]+:[0-9]+" ;;
    esac
    wait "$job"
    rc=$?
    # The error is checked in the job's stderr alone: mpirun forwards the ranks' stdout (a
    # progress line per step here) and stderr separately, and in one file the error line was
    # sometimes spliced into the middle of a progress line.
    out=$(cat "$work/change.err")
    printf '%s\n%s\n[exit %d after %d s]\n' "$(tail -n 6 "$log")" "$out" "$rc" "$(($(date +%s) - start))"
    [[ $rc -ne 124 && $rc -ne 137 ]] || fail "the job did not end within 120 s of the change (a hang)"
    [[ $rc -eq 1 ]] || fail "exit status $rc, expected 1"
    expect_one_error "^hpctrain: error: rank [01]: data set '$copy' changed while this job reads it: $what.*the run stops rather than train on other data"
    ;;
  memory_model_too_large)
    # A CNN with 99x99 kernels at a global batch of 2048 on the portable convolution: its
    # im2col workspace alone is hundreds of GiB per rank. Refused before the first batch,
    # naming the estimate and what the node has, instead of the OOM killer. Then the default model with the available
    # memory overridden to 1 MiB: the check applies to any model.
    printf '{"name": "cnn", "kernel": 99}\n' > "$work/k99.json"
    run 60 env HPCTRAIN_CONV_BACKEND=portable "${train[@]}" --model "$work/k99.json" --global-batch 2048 --max-steps 1
    [[ $rc -eq 1 ]] || fail "exit status $rc, expected 1"
    expect_one_error "^hpctrain: error: rank 0: this training run needs an estimated [0-9.]+ [GTP]iB of memory per rank \(parameters [0-9.]+ MiB, .*convolution workspace [0-9.]+ [GTP]iB \(portable\).*batch 1024 per rank\), [0-9.]+ [GTP]iB for the 2 ranks on this node, more than the [0-9.]+ [MGT]iB available on this node \((MemAvailable in /proc/meminfo|cgroup limit .*)"
    run 60 env HPCTRAIN_MEMORY_AVAILABLE_BYTES=1048576 "${train[@]}" --max-steps 1
    [[ $rc -eq 1 ]] || fail "small memory: exit status $rc, expected 1"
    expect_one_error "^hpctrain: error: rank 0: this training run needs an estimated .* more than the [0-9.]+ MiB available on this node \(HPCTRAIN_MEMORY_AVAILABLE_BYTES\): it would be killed"
    # A model whose parameters alone (70.4 M, 268.4 MiB per buffer) exceed the 64 MiB available is
    # refused before they are allocated: the peak RSS of the run stays below one such buffer
    # (one rank started without mpirun, so that its own peak reaches the parent's rusage; the
    # same model given the memory it needs peaks at 1150 MiB).
    printf '{"name": "mlp", "hidden": [8000, 8000]}\n' > "$work/wide.json"
    run 60 env HPCTRAIN_MEMORY_AVAILABLE_BYTES=67108864 "$python" -c '
import resource, subprocess, sys
rc = subprocess.call(sys.argv[1:])
print(f"peak child RSS {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024} MiB")
sys.exit(rc)' "$hpctrain" train --data "$data" --no-eval --model "$work/wide.json" --max-steps 1
    [[ $rc -eq 1 ]] || fail "wide model: exit status $rc, expected 1"
    expect_one_error "^hpctrain: error: rank 0: this training run needs an estimated .*\(parameters 268\.4 MiB, gradients 268\.4 MiB"
    rss=$(printf '%s\n' "$out" | sed -nE 's/^peak child RSS ([0-9]+) MiB$/\1/p')
    [[ -n $rss && $rss -lt 268 ]] || fail "peak RSS ${rss:-?} MiB: the parameters were allocated before the check"
    ;;
  memory_bench_sizes)
    # Benchmark sizes beyond the memory available are refused before anything is allocated.
    # The available memory is set to 8 GiB, so the outcome does not depend on the machine.
    bench_dir=$(dirname "$hpctrain")
    export HPCTRAIN_MEMORY_AVAILABLE_BYTES=$((8 << 30))
    run 60 "$mpiexec" -n 2 --oversubscribe "$bench_dir/bench_allreduce" --max_bytes=64G --algorithms=ring
    [[ $rc -eq 1 ]] || fail "bench_allreduce: exit status $rc, expected 1"
    expect_one_error "^hpctrain: error: rank 0: --max_bytes=64.0 GiB: the send, receive and scratch buffers of 64.0 GiB each need 192.0 GiB per rank, 384.0 GiB for the 2 ranks on this node, more than the 8.0 GiB available \(HPCTRAIN_MEMORY_AVAILABLE_BYTES\); refused before allocating"
    run 60 "$mpiexec" -n 2 --oversubscribe "$bench_dir/bench_checkpoint" --sizes=64M,4G --dir="$work"
    [[ $rc -eq 2 ]] || fail "bench_checkpoint: exit status $rc, expected 2"
    expect_one_error "^hpctrain: error: rank 0: --sizes=4.0 GiB: the replicated state and its read-back copy need 12.0 GiB per rank, 24.0 GiB for the 2 ranks"
    # A size that fits still runs (the check does not refuse everything).
    run 60 "$mpiexec" -n 2 --oversubscribe "$bench_dir/bench_allreduce" --min_bytes=1K --max_bytes=4K --algorithms=ring --iters=2
    [[ $rc -eq 0 ]] || fail "bench_allreduce at 4 KiB: exit status $rc, expected 0"
    ;;
  *) fail "unknown scenario" ;;
esac
echo "PASS [$scenario]"
