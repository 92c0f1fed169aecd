"""Shared by check_kmeans.py and check_linreg.py: arguments, failure bookkeeping, data set
files in hpctrain's format (io/dataset.hpp), and `mpirun -n P hpctrain ml ...`."""
import argparse, os, subprocess, sys
import h5py
import numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("--hpctrain", required=True)
ap.add_argument("--mpiexec", required=True)
ap.add_argument("--mpiexec-flag", action="append", default=[])
ap.add_argument("--workdir", required=True)
args = ap.parse_args()
os.makedirs(args.workdir, exist_ok=True)
for _stale in ("bad.h5", "bad-pred.h5"):  # a failed earlier run's leftovers must not fail this one
    if os.path.exists(os.path.join(args.workdir, _stale)):
        os.remove(os.path.join(args.workdir, _stale))
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def write_dataset(path, x, targets=None, names=None, labels=True, scale=1.0, classes=None):
    """/samples = x / scale as float32 with attribute `scale`, optional /targets float64 and
    /labels: dummy zeros when `labels` is True, else the given array (with `classes`)."""
    with h5py.File(path, "w") as f:
        s = f.create_dataset("samples", data=(x / scale).astype(np.float32))
        s.attrs["scale"] = scale
        if labels is True:
            f.create_dataset("labels", data=np.zeros(len(x), np.int32))
            f.attrs["classes"] = 1
        elif labels is not False and labels is not None:
            f.create_dataset("labels", data=np.asarray(labels, np.int32))
            f.attrs["classes"] = int(classes if classes is not None else np.max(labels) + 1)
        if targets is not None:
            f.create_dataset("targets", data=targets.astype(np.float64))
        f.attrs["format"] = "hpctrain-dataset"
        f.attrs["format_version"] = 1
        f.attrs["count"] = len(x)
        f.attrs["shape"] = np.array([x.shape[1]], np.int64)
        if names:
            f.attrs["feature_names"] = names


def run_ml(np_, *cmd):
    full = [args.mpiexec, "-n", str(np_)] + [f for f in args.mpiexec_flag if f] + [args.hpctrain, "ml"] + list(cmd)
    return subprocess.run(full, capture_output=True, text=True, timeout=120)


def finish():
    print("FAILED" if failures else "OK", len(failures))
    sys.exit(1 if failures else 0)
