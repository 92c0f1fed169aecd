#!/usr/bin/env bash
# sharded_training.sh HPCTRAIN MPIEXEC WORKDIR PYTHON (with h5py and numpy)
#
# A sharded data set (`hpctrain data shard`, docs/data.md) trains exactly like the file it was
# split from: the samples keep their global indices, so the epoch plan and the bits are the same.
#   1. np 2, streamed from the shards (--data-in-memory-mib 0), evaluated on a sharded test
#      split: the same checksum and test accuracy as the files;
#   2. the shards held in memory (the default for a small set): the same checksum;
#   3. --deterministic at np 1 on the file and np 3 on the shards: the same checksum;
#   4. --shuffle-block 16 (blocks of consecutive samples): np 2 streamed from the shards and in
#      memory from the file, the same checksum (another one than sample shuffling's); with
#      --deterministic, np 1 and np 3 the same;
#   5. `predict` at np 2 over the sharded test split: the same /predictions and /probabilities
#      as over the file (read back with h5py).
set -u
hpctrain=$1 mpiexec=$2 workdir=$3 python=$4
work=$(mktemp -d "$workdir/sharded-XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

"$hpctrain" data synth --samples 3000 --shape 1,28,28 --seed 4 --out "$work/train.h5" > /dev/null || fail "synth train"
"$hpctrain" data synth --samples 700 --shape 1,28,28 --seed 4 --out "$work/test.h5" > /dev/null || fail "synth test"
"$hpctrain" data shard --in "$work/train.h5" --shards 5 --out "$work/train" || fail "shard train"
"$hpctrain" data shard --in "$work/test.h5" --shards 3 --out "$work/test" || fail "shard test"
[[ $(ls "$work/train" | grep -c '^shard-.*\.h5$') -eq 5 && -f $work/train/index.json ]] || fail "expected 5 shards and an index: $(ls "$work/train")"

# run NP DATA EVAL [options]: prints the run's checksum line and its last test-accuracy figure
run() {
  local np=$1 data=$2 eval=$3
  shift 3
  local out
  out=$(timeout -k 5 300 "$mpiexec" -n "$np" --oversubscribe "$hpctrain" train --model mlp --data "$data" \
          --eval-data "$eval" --epochs 2 --max-steps 12 --global-batch 96 --seed 9 "$@" 2>&1) ||
    { printf '%s\n' "$out"; fail "np $np on $data exited non-zero"; }
  local sum acc
  sum=$(printf '%s\n' "$out" | grep -o 'final parameter checksum xxh3:[0-9a-f]*')
  acc=$(printf '%s\n' "$out" | grep -oE 'test loss [0-9.]+  test accuracy [0-9.]+%' | tail -1)
  [[ -n $sum ]] || { printf '%s\n' "$out"; fail "no checksum from np $np on $data"; }
  echo "$sum $acc"
}

file=$(run 2 "$work/train.h5" "$work/test.h5" --data-in-memory-mib 0 --checkpoint-dir "$work/ck")
shards=$(run 2 "$work/train" "$work/test" --data-in-memory-mib 0)
echo "np 2 streamed: file   $file"
echo "np 2 streamed: shards $shards"
[[ $file == "$shards" ]] || fail "the shards trained differently from the file"
[[ $file == *"test accuracy"* ]] || fail "no test loss and accuracy printed"
memory=$(run 2 "$work/train" "$work/test")
echo "np 2 in memory: shards $memory"
[[ $memory == "$file" ]] || fail "the shards held in memory trained differently"
det1=$(run 1 "$work/train.h5" "$work/test.h5" --deterministic --data-in-memory-mib 0)
det3=$(run 3 "$work/train" "$work/test" --deterministic --data-in-memory-mib 0)
echo "deterministic: np 1 file $det1; np 3 shards $det3"
[[ $det1 == "$det3" ]] || fail "--deterministic: np 3 on the shards differs from np 1 on the file"
blocks=$(run 2 "$work/train" "$work/test" --data-in-memory-mib 0 --shuffle-block 16)
blocks_memory=$(run 2 "$work/train.h5" "$work/test.h5" --shuffle-block 16)
echo "--shuffle-block 16: np 2 shards streamed $blocks; file in memory $blocks_memory"
[[ $blocks == "$blocks_memory" ]] || fail "--shuffle-block 16: in memory differs from streamed"
[[ ${blocks%% test*} != "${file%% test*}" ]] || fail "--shuffle-block 16 trained on the same order as sample shuffling"
det_blocks1=$(run 1 "$work/train.h5" "$work/test.h5" --deterministic --shuffle-block 16)
det_blocks3=$(run 3 "$work/train" "$work/test" --deterministic --shuffle-block 16 --data-in-memory-mib 0)
echo "--shuffle-block 16 --deterministic: np 1 $det_blocks1; np 3 $det_blocks3"
[[ $det_blocks1 == "$det_blocks3" ]] || fail "--shuffle-block 16 --deterministic: np 3 differs from np 1"
for data in test.h5 test; do
  timeout -k 5 120 "$mpiexec" -n 2 --oversubscribe "$hpctrain" predict --checkpoint "$work/ck" --data "$work/$data" \
    --out "$work/pred-$data.h5" > /dev/null 2>&1 || fail "predict over $data"
done
"$python" - "$work/pred-test.h5.h5" "$work/pred-test.h5" <<'PY' || fail "predict over the shards differs from over the file"
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
for name in ("predictions", "probabilities"):
    x, y = a[name][:], b[name][:]
    assert x.shape[0] == 700 and np.array_equal(x, y), name
print("predict: file and shards give the same", x.shape[0], "predictions and probabilities")
PY
echo "PASS"
