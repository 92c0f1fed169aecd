#!/usr/bin/env python3
"""`hpctrain ml` on sharded data set directories (`hpctrain data shard`, docs/data.md) through
mpirun (tests/ml/CMakeLists.txt).

Each data set is split into K = 3 uneven shards (3001 samples: 1000, 1000, 1001; 3 sum blocks,
so at np 2 and 3 a rank's slice spans two shards). kmeans (with the purity from /labels), logreg
(with a sharded --eval-data) and linreg (a regression file made by `data import-csv --target`:
/targets, no /labels, `classes` 0) fitted on the file and on the directory at np 1, 2 and 3:
every model dataset's bytes and every model attribute (data_checksum included) the same, and
the printed lines (less the fit time) the same. `ml predict` on the directory writes the predictions it writes for
the file. The regression shards carry /targets and feature_names (h5py). A shard removed, or
replaced by another shard: a clear error naming it, printed once, non-zero exit, no hang at
np 2, no model file.
"""
import json
import os
import re
import shutil
import subprocess

import h5py
import numpy as np

from ml_test_support import args, check, finish, run_ml, write_dataset

W = args.workdir
N = 3001  # not a multiple of 3: shards of 1000, 1000 and 1001


def hpctrain(*cmd):
    return subprocess.run([args.hpctrain] + list(cmd), capture_output=True, text=True, timeout=120)


def shard(path, k=3):
    out = path[:-3] + "-shards"
    shutil.rmtree(out, ignore_errors=True)
    p = hpctrain("data", "shard", "--in", path, "--shards", str(k), "--out", out)
    check(p.returncode == 0, f"data shard {path}: exit {p.returncode}: {p.stderr.strip()[:400]}")
    return out


def h5_contents(path):
    """Every dataset's bytes and every root attribute of an HDF5 file."""
    with h5py.File(path) as f:
        arrays = {}
        f.visititems(lambda name, o: arrays.__setitem__(name, np.array(o).tobytes()) if isinstance(o, h5py.Dataset) else None)
        attrs = {k: (v.tobytes() if isinstance(v, np.ndarray) else v) for k, v in f.attrs.items()}
    return arrays, attrs


def fit(model, np_, data, tag, *extra):
    out = os.path.join(W, f"{model}-{tag}-np{np_}.h5")
    p = run_ml(np_, model, "--data", data, "--out", out, *extra)
    check(p.returncode == 0, f"{model} {data} np{np_}: exit {p.returncode}: {p.stderr.strip()[:400]}")
    if p.returncode:
        return None
    # The printed lines less the model's path and the fit's wall time ("(47 evaluations, 0.01 s)").
    return h5_contents(out), re.sub(r"[0-9.]+ s\)", "T s)", p.stdout.replace(out, "MODEL"))


def same_on_file_and_shards(model, file, shards, *extra):
    results = {}
    for np_ in (1, 2, 3):
        results[("file", np_)] = fit(model, np_, file, "file", *extra)
        results[("shards", np_)] = fit(model, np_, shards, "shards", *extra)
    ref = results[("file", 1)]
    for key, r in results.items():
        if r is None or ref is None:
            continue
        check(r[0] == ref[0], f"{model} {key}: model datasets or attributes differ from the file at np 1")
        check(r[1] == ref[1], f"{model} {key}: printed {r[1]!r}, the file at np 1 printed {ref[1]!r}")
    if ref:
        check(str(ref[0][1].get("data_checksum", "")).startswith("xxh3:"), f"{model}: no data checksum")
    return ref


rng = np.random.default_rng(11)

# Classification: 3 blobs, 5 features, labels for the purity and logreg.
centres = rng.normal(0, 4, (3, 5))
y = rng.integers(0, 3, N)
x = centres[y] + rng.normal(0, 1.5, (N, 5))
blobs = os.path.join(W, "blobs.h5")
write_dataset(blobs, x, labels=y, classes=3)
blobs_dir = shard(blobs)
with open(os.path.join(blobs_dir, "index.json")) as f:
    counts = [s["count"] for s in json.load(f)["shards"]]
check(counts == [1000, 1000, 1001], f"shard counts {counts}")
km = same_on_file_and_shards("kmeans", blobs, blobs_dir, "--k", "3", "--seed", "4")
check(km is not None and "purity" in km[0][1], "kmeans on the shards: no purity from /labels")

yt = rng.integers(0, 3, 700)
test = os.path.join(W, "blobs-test.h5")
write_dataset(test, centres[yt] + rng.normal(0, 1.5, (700, 5)), labels=yt, classes=3)
test_dir = shard(test)
for np_ in (1, 3):
    a = fit("logreg", np_, blobs, "evalfile", "--eval-data", test)
    b = fit("logreg", np_, blobs_dir, "evalshards", "--eval-data", test_dir)
    check(a is not None and b is not None and a == b and "test_accuracy" in a[0][1],
          f"logreg --eval-data np{np_}: file and shards differ")
same_on_file_and_shards("logreg", blobs, blobs_dir, "--l2", "1e-3")

# Regression through the CSV import: /targets, no /labels, `classes` 0, feature_names.
xr = rng.normal(0, 1, (N, 4))
yr = xr @ [1.5, -2.0, 0.5, 3.0] + 0.25 + rng.normal(0, 0.1, N)
csv = os.path.join(W, "reg.csv")
with open(csv, "w") as f:
    f.write("a,b,c,d,y\n")
    for row, t in zip(xr, yr):
        f.write(",".join(repr(float(v)) for v in row) + f",{t!r}\n")
reg = os.path.join(W, "reg.h5")
if os.path.exists(reg):
    os.remove(reg)
p = hpctrain("data", "import-csv", "--csv", csv, "--label-column", "y", "--target", "--out", reg)
check(p.returncode == 0, f"import-csv --target: {p.stderr.strip()[:400]}")
reg_dir = shard(reg)
with open(os.path.join(reg_dir, "index.json")) as f:
    index = json.load(f)
check(index.get("targets") is True and index["classes"] == 0, f"regression index: {index}")
with h5py.File(os.path.join(reg_dir, "shard-00001.h5")) as f:
    check("labels" not in f and np.array_equal(np.array(f["targets"]), yr[1000:2000]),
          "shard 1: /targets are not the samples 1000..1999 of the file's")
    check(list(f.attrs["feature_names"]) == ["a", "b", "c", "d"], f"shard 1 feature_names {f.attrs.get('feature_names')}")
lin = same_on_file_and_shards("linreg", reg, reg_dir)
same_on_file_and_shards("linreg", reg, reg_dir, "--solver", "lbfgs")
p = subprocess.run([args.mpiexec, "-n", "2"] + [f for f in args.mpiexec_flag if f] +
                   [args.hpctrain, "train", "--data", reg_dir, "--model", "mlp", "--epochs", "1"],
                   capture_output=True, text=True, timeout=120)
check(p.returncode != 0 and "have no /labels" in p.stderr, f"train on regression shards: {p.stderr.strip()[:400]}")

# ml predict: the same predictions from the file and from its shards.
if km:
    model = os.path.join(W, "kmeans-file-np1.h5")
    preds = {}
    for np_, data in ((1, blobs), (3, blobs_dir)):
        out = os.path.join(W, f"pred-np{np_}.h5")
        p = run_ml(np_, "predict", "--model", model, "--data", data, "--out", out)
        check(p.returncode == 0, f"predict {data} np{np_}: {p.stderr.strip()[:400]}")
        if p.returncode == 0:
            preds[np_] = {k: v for k, v in h5_contents(out)[0].items()}
    check(len(preds) == 2 and preds[1] == preds[3], "predict: the file (np 1) and the shards (np 3) differ")


def refused(data, needle, what):
    out = os.path.join(W, "bad.h5")
    p = run_ml(2, "kmeans", "--data", data, "--k", "3", "--out", out)
    check(p.returncode != 0, f"{what}: exit 0")
    check(needle in p.stderr, f"{what}: stderr does not name {needle!r}: {p.stderr.strip()[:400]}")
    check(p.stderr.count(needle) == 1, f"{what}: the cause printed {p.stderr.count(needle)} times")
    check(not os.path.exists(out), f"{what}: a model file was written")


# A shard missing (rank 1 of 2 needs it; rank 0 does not) and a shard replaced by another.
missing = os.path.join(W, "missing-shards")
shutil.rmtree(missing, ignore_errors=True)
shutil.copytree(blobs_dir, missing)
os.remove(os.path.join(missing, "shard-00002.h5"))
refused(missing, "shard 2 '" + os.path.join(missing, "shard-00002.h5") + "': no such file", "missing shard")
swapped = os.path.join(W, "swapped-shards")
shutil.rmtree(swapped, ignore_errors=True)
shutil.copytree(blobs_dir, swapped)
shutil.copy(os.path.join(swapped, "shard-00002.h5"), os.path.join(swapped, "shard-00001.h5"))
refused(swapped, "shard 1 '" + os.path.join(swapped, "shard-00001.h5") + "' does not match the index", "swapped shard")
finish()
