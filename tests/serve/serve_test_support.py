"""Shared by the predict and serve end-to-end tests: running hpctrain under mpiexec, a small
Fashion-MNIST training run that leaves a checkpoint, and a float64 NumPy forward pass of the
MLP from the checkpoint's exported parameters (an independent reference)."""
import json
import os
import subprocess
import sys

import h5py
import numpy as np

FASHION = "/usr/share/datasets/fashion-mnist"


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


class Runner:
    def __init__(self, hpctrain, mpiexec, workdir, mpiexec_flags=()):
        self.hpctrain, self.mpiexec, self.workdir = hpctrain, mpiexec, workdir
        self.flags = [f for f in mpiexec_flags if f]
        os.makedirs(workdir, exist_ok=True)

    def mpi_command(self, np_, *args):
        return [self.mpiexec, "-n", str(np_), *self.flags, self.hpctrain, *args]

    def run(self, np_, *args, timeout=300, env=None):
        """(exit code, stdout + stderr) of `mpiexec -n np_ hpctrain args...`."""
        p = subprocess.run(self.mpi_command(np_, *args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=timeout, env=env, text=True)
        return p.returncode, p.stdout

    def must(self, np_, *args, **kw):
        rc, out = self.run(np_, *args, **kw)
        if rc != 0:
            fail(f"hpctrain {' '.join(args)} at np {np_} exited {rc}:\n{out}")
        return out

    def path(self, name):
        return os.path.join(self.workdir, name)

    def import_subset(self, split, limit):
        out = self.path(f"{split}-{limit}.h5")
        if not os.path.exists(out):
            prefix = "train" if split == "train" else "t10k"
            self.must(1, "data", "import-idx", "--limit", str(limit), "--fashion-mnist",
                      "--images", f"{FASHION}/{prefix}-images-idx3-ubyte.gz",
                      "--labels", f"{FASHION}/{prefix}-labels-idx1-ubyte.gz", "--out", out)
        return out

    def train(self, name, train_h5, test_h5, *extra):
        """Trains the MLP briefly at np 2; returns (checkpoint dir, the JSONL summary record)."""
        ckpt, metrics = self.path(name + "-ckpt"), self.path(name + "-metrics.jsonl")
        self.must(2, "train", "--data", train_h5, "--eval-data", test_h5, "--epochs", "1", "--global-batch", "128",
                  "--checkpoint-dir", ckpt, "--overwrite-checkpoints", "--metrics", metrics, "--log-every", "0", *extra)
        summary = [json.loads(l) for l in open(metrics) if '"summary"' in l]
        return ckpt, summary[-1]


def read_samples(h5_path):
    """The data set's samples as float32 values in [0, 1] (stored value x scale) and its labels."""
    with h5py.File(h5_path, "r") as f:
        s = f["samples"]
        u = s[...].astype(np.float32) * np.float32(s.attrs["scale"])
        return u.reshape(u.shape[0], -1), f["labels"][...]


def mlp_reference(runner, step_dir, u, mean, std):
    """Softmax probabilities of the MLP in float64 from `hpctrain ckpt export`'s parameters."""
    exported = runner.path("exported.h5")
    runner.must(1, "ckpt", "export", step_dir, exported)
    with h5py.File(exported, "r") as f:
        names = sorted((k for k in f.keys() if k.endswith(".weight")), key=lambda k: int(k.split(".")[0]))
        layers = [(f[k][...].astype(np.float64), f[k.replace(".weight", ".bias")][...].astype(np.float64)) for k in names]
    h = (u.astype(np.float64) - mean) / std
    for i, (w, b) in enumerate(layers):
        h = h @ w.T + b
        if i + 1 < len(layers):
            h = np.maximum(h, 0.0)
    z = h - h.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)
