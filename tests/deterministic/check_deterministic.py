#!/usr/bin/env python3
"""Deterministic mode through the real command (issue 11).

For one model: `hpctrain train --deterministic` at np 1, 2, 3 and 4 must end with byte-identical
parameters (the final checkpoint exported with `hpctrain ckpt export`, read with h5py), the
same printed checksum (`final parameter checksum xxh3:...`, also equal to the checksum the
checkpoint manifest records), and the same evaluation loss and accuracy (metrics JSON, full
precision). Elastic: a run at np 4 checkpoints half-way; resumed at np 3 and at np 1 it must
finish byte-identical to the uninterrupted np 2 run. A control (MLP) shows the comparison can
fail: without --deterministic, np 1 and np 3 end with different bytes. Every run uses one BLAS
thread per rank (OPENBLAS_NUM_THREADS=1) so oversubscribed ranks do not fight over the cores,
but one at np 1 with two threads per rank, which must give the same bytes.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import h5py
import numpy as np


def run(cmd, extra_env=None, expect_failure=False, **kw):
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", **(extra_env or {}))
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    if expect_failure:
        if p.returncode == 0:
            sys.exit("expected a failure, got exit 0: %s\n%s" % (" ".join(cmd), p.stdout))
        return p.stdout
    if p.returncode != 0:
        sys.exit("FAILED (%d): %s\n%s" % (p.returncode, " ".join(cmd), p.stdout))
    return p.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hpctrain", required=True)
    ap.add_argument("--mpiexec", required=True)
    ap.add_argument("--fashion-dir", required=True)
    ap.add_argument("--model", required=True, help="mlp, cnn, resnet or transformer")
    ap.add_argument("--workdir", default=None)
    a = ap.parse_args()
    work = a.workdir or tempfile.mkdtemp(prefix="det-%s-" % a.model)
    os.makedirs(work, exist_ok=True)
    hp = a.hpctrain

    def data(split, prefix, limit):
        out = os.path.join(work, "%s-%d.h5" % (split, limit))
        if not os.path.exists(out):
            run([hp, "data", "import-idx", "--fashion-mnist", "--limit", str(limit),
                 "--images", os.path.join(a.fashion_dir, prefix + "-images-idx3-ubyte.gz"),
                 "--labels", os.path.join(a.fashion_dir, prefix + "-labels-idx1-ubyte.gz"),
                 "--out", out])
        return out

    if a.model == "mlp":
        # Dropout (counter-based masks keyed by global sample), AdamW, cosine schedule, one
        # epoch with the last partial batch kept (1000 = 10 x 96 + 40: micro-shards 16, 16, 8).
        config = os.path.join(work, "mlp-dropout.json")
        with open(config, "w") as f:
            json.dump({"name": "mlp", "hidden": [256, 128], "dropout": 0.2}, f)
        train = data("train", "train", 1000)
        common = ["--model", config, "--global-batch", "96", "--micro-shard", "16", "--epochs", "1",
                  "--keep-last", "--optimizer", "adamw", "--lr", "0.002", "--schedule", "cosine",
                  "--weight-decay", "0.01"]
        total, half = 11, 6
    elif a.model == "resnet":
        # Batch norm: each micro-shard normalises with its own statistics; the running
        # statistics ride the exact gradient sum. SGD with weight decay (which must not move
        # them) and clipping; 5 micro-shards per global batch of 72 as for the CNN.
        config = os.path.join(work, "resnet-small.json")
        with open(config, "w") as f:
            json.dump({"name": "resnet", "channels": [4, 8], "blocks": 1}, f)
        train = data("train", "train", 288)
        common = ["--model", config, "--global-batch", "72", "--micro-shard", "16", "--max-steps", "4",
                  "--lr", "0.05", "--momentum", "0.9", "--weight-decay", "0.0005", "--clip-norm", "5"]
        total, half = 4, 2
    elif a.model == "transformer":
        # Patch embedding, layer norm, self-attention and the GELU MLP on micro-shards; AdamW
        # with weight decay, a warm-up-free cosine schedule, clipping.
        config = os.path.join(work, "transformer-small.json")
        with open(config, "w") as f:
            json.dump({"name": "transformer", "patch": 7, "dim": 16, "depth": 2, "heads": 2, "mlp_dim": 32}, f)
        train = data("train", "train", 288)
        common = ["--model", config, "--global-batch", "72", "--micro-shard", "16", "--max-steps", "4",
                  "--optimizer", "adamw", "--lr", "0.002", "--weight-decay", "0.01", "--schedule", "cosine",
                  "--clip-norm", "1"]
        total, half = 4, 2
    else:
        # SGD with momentum and clipping; 5 micro-shards (16, 16, 16, 16, 8) per global batch
        # of 72, so np 3 and np 4 hold unequal numbers of micro-shards.
        train = data("train", "train", 288)
        common = ["--model", "cnn", "--global-batch", "72", "--micro-shard", "16", "--max-steps", "4",
                  "--lr", "0.05", "--momentum", "0.9", "--clip-norm", "5"]
        total, half = 4, 2
    test = data("test", "t10k", 300 if a.model == "mlp" else 100)
    global_batch = int(common[common.index("--global-batch") + 1])
    micro_shard = int(common[common.index("--micro-shard") + 1])
    common += ["--data", train, "--eval-data", test, "--log-every", "0", "--seed", "7"]

    def train_run(tag, np_, extra, deterministic=True, extra_env=None):
        ckpt = os.path.join(work, "ckpt-" + tag)
        shutil.rmtree(ckpt, ignore_errors=True)  # a fresh run each time the test runs
        metrics = os.path.join(work, "metrics-%s.jsonl" % tag)
        cmd = [a.mpiexec, "-n", str(np_), "--oversubscribe", hp, "train"] + common + \
              ["--checkpoint-dir", ckpt, "--metrics", metrics] + extra
        if deterministic:
            cmd.append("--deterministic")
        out = run(cmd, extra_env)
        m = re.findall(r"final parameter checksum xxh3:([0-9a-f]{16})", out)
        if len(m) != 1:
            sys.exit("no checksum line in the output of %s:\n%s" % (tag, out))
        if deterministic and "deterministic mode" not in out:
            sys.exit("%s: no 'deterministic mode' line:\n%s" % (tag, out))
        step_dir = os.path.join(ckpt, "step-%d" % total)
        manifest = json.load(open(os.path.join(step_dir, "manifest.json")))
        recorded = "%016x" % manifest["metadata"]["parameter_checksum"]
        if recorded != m[0]:
            sys.exit("%s: printed checksum %s but the checkpoint records %s" % (tag, m[0], recorded))
        exported = os.path.join(work, "params-%s.h5" % tag)
        run([hp, "ckpt", "export", step_dir, exported])
        params = {}
        with h5py.File(exported, "r") as f:
            f.visititems(lambda name, obj: params.__setitem__(name, obj[()].tobytes())
                         if isinstance(obj, h5py.Dataset) else None)
        evals = [json.loads(l) for l in open(metrics) if '"eval"' in l]
        print("%-8s np %d  xxh3 %s  %d tensors  eval loss %r accuracy %r" %
              (tag, np_, m[0], len(params), evals[-1]["loss"] if evals else None,
               evals[-1]["accuracy"] if evals else None))
        return {"checksum": m[0], "params": params, "eval": evals[-1] if evals else None, "ckpt": ckpt, "out": out}

    def same(x, y):
        return x["checksum"] == y["checksum"] and x["params"] == y["params"]

    failures = []
    runs = {np_: train_run("np%d" % np_, np_, []) for np_ in (1, 2, 3, 4)}
    for np_ in (2, 3, 4):
        if not same(runs[np_], runs[1]):
            failures.append("np %d differs from np 1" % np_)
        if runs[np_]["eval"] != runs[1]["eval"]:
            failures.append("np %d evaluation %r differs from np 1's %r" % (np_, runs[np_]["eval"], runs[1]["eval"]))
    if not runs[1]["params"] or runs[1]["eval"] is None:
        failures.append("no parameters or no evaluation recorded")
    idle_note = "micro-shards per global batch: "
    if any(idle_note in r["out"] for r in runs.values()):
        failures.append("an idle-rank note although every rank holds a micro-shard")
    # Two or more micro-shards per rank on two or more ranks: a note names the wider micro-shard
    # that keeps every rank busy; one micro-shard per rank or fewer, or one rank: none.
    for np_, r in runs.items():
        shards = -(-global_batch // micro_shard)
        wanted = np_ >= 2 and shards >= 2 * np_
        widest = -(-global_batch // np_)
        note = "--micro-shard %d would run faster with every rank still busy" % widest
        if wanted and note not in r["out"]:
            failures.append("np %d: no note naming --micro-shard %d:\n%s" % (np_, widest, r["out"]))
        if not wanted and "would run faster with every rank still busy" in r["out"]:
            failures.append("np %d: a wider-micro-shard note with fewer than two micro-shards per rank" % np_)

    # More ranks than micro-shards (MLP only): at micro-shards of 32 a global batch of 96 has 3,
    # so one of 4 ranks holds none (and the last, partial batch of 40 has 2); the start-up line
    # says so, and the bytes still equal one rank's.
    if a.model == "mlp":
        wide1 = train_run("ms32-np1", 1, ["--micro-shard", "32"])
        wide4 = train_run("ms32-np4", 4, ["--micro-shard", "32"])
        if not same(wide1, wide4):
            failures.append("micro-shard 32: np 4 (one rank idle) differs from np 1")
        if same(wide1, runs[1]):
            failures.append("micro-shards of 32 and 16 gave the same bytes: the micro-shard is not in effect")
        if "3 micro-shards per global batch: 1 of the 4 ranks hold none" not in wide4["out"]:
            failures.append("np 4 at micro-shard 32: no idle-rank note:\n" + wide4["out"])

    # Every model here runs grouped passes (a pass per aligned node of a rank's micro-shards, the
    # gradients summed over the micro-shard leaves in the kernels; the convolutions run their
    # leaves side by side on the rank's threads; batch norm normalises each leaf with its own
    # statistics; the attention runs leaf by leaf); a pass per micro-shard must give the same bytes.
    grouped = a.model in ("mlp", "cnn", "resnet", "transformer")
    if grouped:
        passes = train_run("passes-ms-np3", 3, [], extra_env={"HPCTRAIN_DETERMINISTIC_PASSES": "micro-shard"})
        if not same(passes, runs[1]):
            failures.append("HPCTRAIN_DETERMINISTIC_PASSES=micro-shard at np 3 differs from grouped passes at np 1")
        bad = run([a.mpiexec, "-n", "2", "--oversubscribe", hp, "train"] + common + ["--deterministic", "--max-steps", "1"],
                  extra_env={"HPCTRAIN_DETERMINISTIC_PASSES": "bogus"}, expect_failure=True)
        if bad.count("HPCTRAIN_DETERMINISTIC_PASSES='bogus'") != 1:
            failures.append("an unknown HPCTRAIN_DETERMINISTIC_PASSES: not named exactly once:\n" + bad)

    # Threads inside a rank: OpenBLAS and oneDNN stay on one thread, hpctrain's own kernels whose
    # bits do not depend on their thread count (libxsmm's column blocks, element-wise loops, the
    # optimiser) run on the rank's two; the bytes must equal one thread's.
    two = train_run("threads2-np1", 1, [], extra_env={"HPCTRAIN_THREADS_PER_RANK": "2"})
    if not same(two, runs[1]):
        failures.append("np 1 with 2 threads per rank differs from np 1 with 1")
    if "oneDNN: 1, thread-count-independent kernels: 2" not in two["out"]:
        failures.append("2 threads per rank: the start-up line does not give the kernels' threads:\n" + two["out"])
    # A pass per micro-shard (HPCTRAIN_DETERMINISTIC_PASSES=micro-shard, or a model with a layer
    # without leaf rows) runs its layers on the held oneDNN: the start-up says that one rank per
    # core is faster there, and not where the grouped passes keep the rank's threads busy (every
    # registry model now: the convolutions' and the attention's leaves run side by side on the
    # rank's threads). Same bytes.
    idle_threads = "leave 1 idle there; one rank per core"
    if idle_threads in two["out"]:
        failures.append("2 threads per rank: the one-rank-per-core note is printed for %s's grouped passes:\n%s" %
                        (a.model, two["out"]))
    if grouped:
        two_ms = train_run("threads2-ms-np1", 1, [], extra_env={"HPCTRAIN_THREADS_PER_RANK": "2",
                                                                "HPCTRAIN_DETERMINISTIC_PASSES": "micro-shard"})
        if not same(two_ms, runs[1]):
            failures.append("a pass per micro-shard at 2 threads per rank differs from np 1 with 1")
        if idle_threads not in two_ms["out"]:
            failures.append("a pass per micro-shard at 2 threads per rank: no one-rank-per-core note:\n" +
                            two_ms["out"])
    if any(idle_threads in r["out"] for r in runs.values()):
        failures.append("the one-rank-per-core note at one thread per rank")

    # Elastic: np 4 checkpoints at `half`; resume at np 3 and np 1; compare with np 2.
    first = train_run("np4-full", 4, ["--checkpoint-every", str(half)])
    half_dir = os.path.join(first["ckpt"], "step-%d" % half)
    for np_ in (3, 1):
        resumed = train_run("resume%d" % np_, np_, ["--resume", half_dir])
        if not same(resumed, runs[2]):
            failures.append("np 4 -> np %d resume differs from the uninterrupted np 2 run" % np_)

    # Control: the comparison can fail. Without --deterministic np 1 and np 3 differ (MLP
    # only: one control keeps the CNN case short).
    plain1 = train_run("plain1", 1, [], deterministic=False) if a.model == "mlp" else None
    plain3 = train_run("plain3", 3, [], deterministic=False) if a.model == "mlp" else None
    if plain1 and same(plain1, plain3):
        failures.append("control: without --deterministic np 1 and np 3 gave identical bytes; "
                        "this test would not notice a broken deterministic mode")
    if failures:
        sys.exit("FAILED:\n  " + "\n  ".join(failures))
    print("OK: %s bitwise identical at np 1-4 and after np 4 -> np 3 / np 1 resume" % a.model)


if __name__ == "__main__":
    main()
