#!/usr/bin/env python3
"""`hpctrain ml` on a uint8 data set, whose samples the fitters keep as stored and widen block by
block (dataset_slice.hpp), against the same values stored as float64 (tests/ml/CMakeLists.txt).

The reference file holds, as float64 with scale 1, numpy's float64(v) * (1/255) of every byte
(the IEEE product the fitters used when they held every sample as f64): every model file
fitted on the uint8 file -- kmeans (k-means||, k-means++, random; and --standardize), logreg
(--products f64 and f32; and --standardize, with --eval-data), linreg (normal equations,
--standardize) -- must have the same datasets and attributes, bit for bit, as the one fitted on
the float64 file at np 2, and the same at np 1 and 3; `ml predict` on both files the same
/labels and /probabilities; a sharded copy of the uint8 file (`data shard`, 3 shards) the same
models at np 2 and 3. Data: 3500 samples (4 sum blocks, the last partial) of 100 bytes,
10 classes of clipped Gaussian blobs (values 0..255 all present).
"""
import os
import shutil
import subprocess
import h5py
import numpy as np

from ml_test_support import args, check, finish, run_ml

rng = np.random.default_rng(21)
n, d, classes = 3500, 100, 10
labels = rng.integers(0, classes, n)
means = rng.uniform(30, 225, (classes, d))
pixels = np.clip(np.rint(means[labels] + rng.normal(0, 60, (n, d))), 0, 255).astype(np.uint8)
targets = pixels.astype(np.float64) @ rng.normal(0, 1, d) / 255.0 + rng.normal(0, 0.1, n)
check(pixels.min() == 0 and pixels.max() == 255, "the data covers 0..255")


def write(path, samples, scale):
    with h5py.File(path, "w") as f:
        s = f.create_dataset("samples", data=samples)
        if scale is not None:
            s.attrs["scale"] = scale
        f.create_dataset("labels", data=labels.astype(np.int32))
        f.create_dataset("targets", data=targets)
        f.attrs["classes"] = classes
        f.attrs["format"] = "hpctrain-dataset"
        f.attrs["format_version"] = 1
        f.attrs["count"] = n
        f.attrs["shape"] = np.array([d], np.int64)


u8 = os.path.join(args.workdir, "u8.h5")
f64 = os.path.join(args.workdir, "f64.h5")
write(u8, pixels, 1.0 / 255.0)
write(f64, pixels.astype(np.float64) * (1.0 / 255.0), 1.0)

fits = {
    "kmeans-parallel": ["kmeans", "--k", "10", "--seed", "3", "--tol", "0", "--max-iter", "15"],
    "kmeans++": ["kmeans", "--k", "10", "--seed", "3", "--init", "kmeans++", "--max-iter", "15"],
    "kmeans-random-std": ["kmeans", "--k", "7", "--seed", "5", "--init", "random", "--standardize"],
    "logreg-f64": ["logreg", "--max-iter", "15", "--products", "f64"],
    "logreg-f32": ["logreg", "--max-iter", "15", "--products", "f32"],
    "logreg-std-eval": ["logreg", "--max-iter", "10", "--standardize", "--eval-data", "DATA"],
    "linreg-std": ["linreg", "--standardize"],
}


def model(path):
    """Every dataset's bytes and every attribute of a model or predictions file."""
    with h5py.File(path) as f:
        out = {k: repr(v) for k, v in f.attrs.items() if k not in ("model_file", "data")}
        f.visititems(lambda name, o: out.__setitem__(name, np.array(o).tobytes()) if isinstance(o, h5py.Dataset) else None)
    return out


def fit(np_, name, data):
    out = os.path.join(args.workdir, f"{name}-{os.path.basename(data)}-np{np_}.h5")
    cmd = [data if c == "DATA" else c for c in fits[name]]
    p = run_ml(np_, *cmd[:1], "--data", data, "--out", out, *cmd[1:])
    check(p.returncode == 0, f"{name} {data} np{np_}: exit {p.returncode}: {p.stderr.strip()[:400]}")
    return model(out) if p.returncode == 0 else None


for name in fits:
    want = fit(2, name, f64)
    for np_ in (1, 2, 3):
        got = fit(np_, name, u8)
        if want is None or got is None:
            continue
        differ = sorted(k for k in set(want) | set(got) if want.get(k) != got.get(k))
        check(not differ, f"{name} np{np_}: uint8 file's model differs from the float64 file's in {differ}")
    check(want is None or len(want) >= 5, f"{name}: model file has {sorted(want or [])}")

# a sharded uint8 directory (3 uneven shards; at np 2 and 3 a slice spans two): the same models
shards = os.path.join(args.workdir, "u8-shards")
if os.path.isdir(shards):
    shutil.rmtree(shards)
p = subprocess.run([args.hpctrain, "data", "shard", "--in", u8, "--shards", "3", "--out", shards],
                   capture_output=True, text=True, timeout=60)
check(p.returncode == 0, f"data shard: exit {p.returncode}: {p.stderr.strip()[:400]}")
for name in ("kmeans-parallel", "logreg-f32", "logreg-std-eval"):
    want = model(os.path.join(args.workdir, f"{name}-f64.h5-np2.h5"))
    for np_ in (2, 3):
        got = fit(np_, name, shards) if p.returncode == 0 else None
        if got is not None:
            differ = sorted(k for k in set(want) | set(got) if want.get(k) != got.get(k))
            check(not differ, f"{name} shards np{np_}: differs from the float64 file's model in {differ}")

# predict: the same predictions from both files (a standardised model: the scaling applied on widening)
for name in ("kmeans-random-std", "logreg-std-eval"):
    mfile = os.path.join(args.workdir, f"{name}-f64.h5-np2.h5")
    preds = {}
    for data in (f64, u8):
        out = os.path.join(args.workdir, f"pred-{name}-{os.path.basename(data)}")
        p = run_ml(3, "predict", "--model", mfile, "--data", data, "--out", out)
        check(p.returncode == 0, f"predict {name} {data}: {p.stderr.strip()[:400]}")
        if p.returncode == 0:
            preds[data] = model(out)
    if len(preds) == 2:
        check(preds[f64] == preds[u8], f"predict {name}: uint8 and float64 files differ")
finish()
