#!/usr/bin/env python3
"""`hpctrain ml predict` through mpirun (tests/ml/CMakeLists.txt).

Fits kmeans, linreg and logreg on small real HDF5 files, then predicts a second file at
np 1, 2, 3: /predictions (and logreg's /probabilities) equal numpy's computation from the model
file's own arrays (nearest centroid, X w + b, softmax argmax), and the datasets' bytes are
identical at every np. Bad input: a missing model file, a file that is no model, a data set
with another feature count: one clear error each, non-zero exit, no output file.
"""
import os
import h5py
import numpy as np

from ml_test_support import args, check, finish, run_ml, write_dataset

rng = np.random.default_rng(11)
n, d, c = 2600, 5, 3


def f32(x):
    return x.astype(np.float32).astype(np.float64)


x = f32(rng.normal(0, 1, (n, d)) + np.repeat(np.eye(3, d) * 4, n // 3 + 1, 0)[:n])
y = np.argmax(x[:, :3], 1)
t = x @ np.array([1.0, -2.0, 0.5, 0.0, 3.0]) + 0.25 + rng.normal(0, 0.1, n)
xq = f32(rng.normal(0, 2, (2100, d)))  # the data predicted: 3 sum blocks
train = os.path.join(args.workdir, "train.h5")
query = os.path.join(args.workdir, "query.h5")
narrow = os.path.join(args.workdir, "narrow.h5")
write_dataset(train, x, targets=t, labels=y, classes=c)
write_dataset(query, xq, labels=False)
write_dataset(narrow, xq[:, :4], labels=False)

models = {}
for name, extra in [("kmeans", ["--k", "3"]), ("linreg", []), ("logreg", ["--l2", "1e-3"]),
                    ("logreg-std", ["--l2", "1e-3", "--standardize"])]:
    out = os.path.join(args.workdir, f"{name}.h5")
    p = run_ml(2, name.split("-")[0], "--data", train, "--out", out, *extra)
    check(p.returncode == 0, f"fit {name}: exit {p.returncode}: {p.stderr.strip()[:400]}")
    models[name] = out


def softmax(z):
    z = z - z.max(1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(1, keepdims=True)


for name, path in models.items():
    with h5py.File(path) as f:
        if name == "kmeans":
            cent = np.array(f["centroids"])
            expect = np.argmin(((xq[:, None, :] - cent[None]) ** 2).sum(2), 1)
        elif name == "linreg":
            expect = xq @ np.array(f["coefficients"]) + np.array(f["intercept"])[0]
        else:
            xin = xq
            if name == "logreg-std":  # predict applies the training set's scaling itself
                xin = (xq - np.array(f["standardize_mean"])) / np.array(f["standardize_std"])
                check(np.allclose(np.array(f["standardize_mean"]), x.mean(0), rtol=1e-12), "standardize_mean")
            prob = softmax(xin @ np.array(f["coefficients"]).T + np.array(f["intercept"]))
            expect = np.argmax(prob, 1)
    seen = {}
    for np_ in (1, 2, 3):
        out = os.path.join(args.workdir, f"pred-{name}-np{np_}.h5")
        p = run_ml(np_, "predict", "--model", path, "--data", query, "--out", out)
        check(p.returncode == 0, f"predict {name} np{np_}: exit {p.returncode}: {p.stderr.strip()[:400]}")
        if p.returncode:
            continue
        with h5py.File(out) as f:
            pred = np.array(f["predictions"])
            check(f.attrs["model"] == name.split("-")[0] and f.attrs["count"] == len(xq),
                  f"{name}: attributes {dict(f.attrs)}")
            blob = pred.tobytes()
            if name == "linreg":
                check(pred.dtype == np.float64 and np.allclose(pred, expect, rtol=1e-12, atol=1e-12),
                      f"linreg np{np_}: {pred[:4]} vs {expect[:4]}")
            else:
                check(pred.dtype == np.int32 and np.array_equal(pred, expect),
                      f"{name} np{np_}: {np.sum(pred != expect)} predictions differ from numpy's")
            if name.startswith("logreg"):
                pr = np.array(f["probabilities"])
                check(pr.dtype == np.float32 and pr.shape == (len(xq), c) and np.allclose(pr, prob, atol=1e-6),
                      f"logreg np{np_}: probabilities differ from numpy's softmax")
                blob += pr.tobytes()
            seen[np_] = blob
    check(len(seen) == 3 and len(set(seen.values())) == 1, f"{name}: prediction bytes differ over np 1..3")

bad_out = os.path.join(args.workdir, "bad-pred.h5")
for model, data, needle in [(os.path.join(args.workdir, "nope.h5"), query, "nope.h5': no such file"),
                            (query, query, "not an hpctrain model file"),
                            (models["logreg"], narrow, "takes samples of 5 values")]:
    p = run_ml(2, "predict", "--model", model, "--data", data, "--out", bad_out)
    check(p.returncode != 0, f"predict {model} {data}: exit 0")
    check(needle in p.stderr and p.stderr.count(needle) == 1,
          f"predict {model} {data}: stderr lacks (or repeats) {needle!r}: {p.stderr.strip()[:400]}")
check(not os.path.exists(bad_out), "a failed predict left an output file")

finish()
