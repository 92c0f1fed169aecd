"""`hpctrain train --tensorboard`: reads the event files back with TensorBoard's own reader.

Runs a 2-epoch training at np 2 with --metrics and --tensorboard, then loads the event
directory with tensorboard's EventAccumulator (which checks the record framing and CRCs as
TensorBoard does) and requires every scalar tag to hold exactly the JSONL's steps and values
(as float32, the type of a TensorBoard scalar). Fails, never skips, when tensorboard is missing.
"""
import argparse
import glob
import json
import os
import shutil
import struct
import subprocess
import sys

from tensorboard.backend.event_processing import event_accumulator

TAGS = {  # TensorBoard tag -> (JSONL record type, field)
    "train/loss": ("train", "loss"),
    "train/lr": ("train", "lr"),
    "train/samples_per_s": ("train", "samples_per_s"),
    "time/compute_s": ("train", "compute_s"),
    "time/exposed_comm_s": ("train", "comm_exposed_s"),
    "eval/loss": ("eval", "loss"),
    "eval/accuracy": ("eval", "accuracy"),
}


def as_float32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--hpctrain", required=True)
    p.add_argument("--mpiexec", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--workdir", required=True)
    a = p.parse_args()
    shutil.rmtree(a.workdir, ignore_errors=True)
    os.makedirs(a.workdir)
    tb_dir = os.path.join(a.workdir, "tb")
    metrics = os.path.join(a.workdir, "metrics.jsonl")
    cmd = [a.mpiexec, "-n", "2", "--oversubscribe", a.hpctrain, "train", "--data", a.data,
           "--eval-data", a.data, "--epochs", "2", "--global-batch", "64", "--log-every", "2",
           "--metrics", metrics, "--tensorboard", tb_dir, "--quiet"]
    subprocess.run(cmd, check=True, timeout=150)

    files = glob.glob(os.path.join(tb_dir, "events.out.tfevents.*"))
    assert len(files) == 1, f"expected one event file (rank 0 writes), found {files}"
    records = [json.loads(line) for line in open(metrics)]
    acc = event_accumulator.EventAccumulator(tb_dir, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert tags == set(TAGS), f"scalar tags {sorted(tags)}, expected {sorted(TAGS)}"
    for tag, (kind, field) in TAGS.items():
        want = [(r["step"], as_float32(r[field])) for r in records if r["type"] == kind]
        got = [(e.step, e.value) for e in acc.Scalars(tag)]
        assert want, f"no {kind} records in {metrics}"
        assert got == want, f"{tag}: event file {got} != JSONL {want}"
    print(f"check_tensorboard: {len(TAGS)} tags, "
          f"{sum(len(acc.Scalars(t)) for t in TAGS)} scalars equal the JSONL's")


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        print(f"check_tensorboard: FAILED: {e}", file=sys.stderr)
        sys.exit(1)
