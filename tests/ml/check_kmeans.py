#!/usr/bin/env python3
"""`hpctrain ml kmeans` through mpirun on real HDF5 files (tests/ml/CMakeLists.txt).

Known answer: 3 well-separated clusters in 3-d whose points are exact dyadic offsets around
integer centres, so the centroids are exact and the inertia is known in closed form; 5000
samples (5 sum blocks) so that np 2..4 split them. The /centroids bytes must be identical at
np 1, 2, 3, 4 on a second, noisy data set (scale 0.1, so plain f64 sums would differ by P:
checked by replacing the exact sum with a plain all-reduce, which fails this), whose result must
be a fixed point of numpy's float64 Lloyd step. Bounds: near-tie data (a third of the samples on a bisector,
all offset by 1000) give the bytes of --no-bounds at np 1, 3, f32 and f64 (a zero margin fails this). Bad input: K > N, K <= 0, NaN in the data: one clear error, non-zero exit.
"""
import os
import h5py
import numpy as np

from ml_test_support import args, check, finish, run_ml as run, write_dataset

# ---- exact clusters ---------------------------------------------------------------------
centres = np.array([[10.0, 0.0, 0.0], [0.0, 10.0, 0.0], [0.0, 0.0, -10.0]])
offsets = np.array([[0.5, 0, 0], [-0.5, 0, 0], [0, 0.25, 0], [0, -0.25, 0]])
rng = np.random.default_rng(1)
n = 5000
assign = rng.integers(0, 3, n)
which = np.arange(n) % 4
x = centres[assign] + offsets[which]
# balance the offsets per cluster so each cluster's mean is exactly its centre
keep = np.zeros(n, bool)
for c in range(3):
    idx = np.flatnonzero(assign == c)
    per = min(np.sum(which[idx] == o) for o in range(4))
    for o in range(4):
        keep[idx[which[idx] == o][:per]] = True
x = x[keep]
exact = os.path.join(args.workdir, "exact.h5")
write_dataset(exact, x)
expected_inertia = float(np.sum(np.min(((x[:, None, :] - centres[None]) ** 2).sum(-1), axis=1)))

blobs = os.path.join(args.workdir, "blobs.h5")
y = np.concatenate([rng.normal(m, 1.0, (1500, 4)) for m in (-3.0, 0.0, 3.0)])
rng.shuffle(y)
# scale 0.1: the samples (stored x 0.1) fill all 53 bits, so an f64 sum in another order or
# split would round differently and the np 1..4 comparison can fail.
write_dataset(blobs, y, scale=0.1)

bytes_by_np = {}
for np_ in (1, 2, 3, 4):
    out = os.path.join(args.workdir, f"exact-np{np_}.h5")
    p = run(np_, "kmeans", "--data", exact, "--k", "3", "--products", "f64" if np_ % 2 else "f32", "--out", out)
    check(p.returncode == 0, f"kmeans exact np{np_} exit {p.returncode}: {p.stderr.strip()}")
    if p.returncode:
        continue
    with h5py.File(out) as f:
        got = np.array(f["centroids"])
        check(f.attrs["model"] == "kmeans", "model attribute")
        check(f.attrs["iterations"] >= 1, "iterations attribute")
        order = np.argsort([np.argmin(((centres - g) ** 2).sum(1)) for g in got])
        check(np.array_equal(got[order], centres), f"np{np_}: centroids {got.tolist()} != {centres.tolist()}")
        check(f.attrs["inertia"] == expected_inertia, f"np{np_}: inertia {f.attrs['inertia']} != {expected_inertia}")
    out = os.path.join(args.workdir, f"blobs-np{np_}.h5")
    for init in ("kmeans-parallel", "kmeans++", "random"):
        p = run(np_, "kmeans", "--data", blobs, "--k", "3", "--init", init, "--seed", "7", "--tol", "0", "--out", out)
        check(p.returncode == 0, f"kmeans blobs np{np_} {init}: {p.stderr.strip()}")
        if p.returncode == 0:
            with h5py.File(out) as f:
                bytes_by_np.setdefault(init, {})[np_] = (np.array(f["centroids"]).tobytes(), float(f.attrs["inertia"]))
for init, by in bytes_by_np.items():
    check(len(set(v[0] for v in by.values())) == 1 and len(by) == 4, f"{init}: /centroids bytes differ over np 1..4")
    check(len(set(v[1] for v in by.values())) == 1, f"{init}: inertia differs over np 1..4")

# float64 reference: numpy's Lloyd from the same result's centres is a fixed point
if "kmeans++" in bytes_by_np and 1 in bytes_by_np["kmeans++"]:
    c = np.frombuffer(bytes_by_np["kmeans++"][1][0]).reshape(3, 4)
    yy = (y / 0.1).astype(np.float32).astype(np.float64) * 0.1
    lab = np.argmin(((yy[:, None] - c[None]) ** 2).sum(-1), axis=1)
    ref = np.array([yy[lab == j].mean(0) for j in range(3)])
    check(np.allclose(ref, c, rtol=1e-12, atol=1e-12), f"not a Lloyd fixed point: {ref} vs {c}")
    inertia = float(np.sum((yy - c[lab]) ** 2))
    check(abs(inertia - bytes_by_np["kmeans++"][1][1]) <= 1e-9 * inertia, "inertia vs numpy")

# k-means|| on the exact clusters with one round of a large oversampling: the candidates cover
# all three clusters, so the weighted reclustering must land on the centres themselves.
for np_ in (1, 3):
    out = os.path.join(args.workdir, f"parallel-np{np_}.h5")
    p = run(np_, "kmeans", "--data", exact, "--k", "3", "--init", "kmeans-parallel", "--init-rounds", "1",
            "--oversampling", "10", "--max-iter", "1", "--out", out)
    check(p.returncode == 0, f"kmeans-parallel np{np_}: {p.stderr.strip()[:400]}")
    if p.returncode == 0:
        with h5py.File(out) as f:
            got = np.array(f["centroids"])
            order = np.lexsort(got.T[::-1])
            check(np.array_equal(got[order], centres[np.lexsort(centres.T[::-1])]),
                  f"kmeans-parallel np{np_}: centroids {got.tolist()} after one Lloyd step")

# purity against /labels: numpy's majority count per cluster of the written centroids.
lab = (np.arange(len(y)) % 3).astype(np.int32)  # arbitrary labels, so purity is well below 1
labelled = os.path.join(args.workdir, "labelled.h5")
write_dataset(labelled, y, labels=lab, classes=3)
for np_ in (1, 2):
    out = os.path.join(args.workdir, f"purity-np{np_}.h5")
    p = run(np_, "kmeans", "--data", labelled, "--k", "3", "--out", out)
    check(p.returncode == 0, f"kmeans purity np{np_}: {p.stderr.strip()[:400]}")
    if p.returncode == 0:
        with h5py.File(out) as f:
            cent = np.array(f["centroids"])
            got = float(f.attrs["purity"])
        yf = y.astype(np.float32).astype(np.float64)  # the values the file holds
        near = np.argmin(((yf[:, None, :] - cent[None]) ** 2).sum(2), 1)
        expect = sum(np.bincount(lab[near == c], minlength=3).max() for c in range(3) if np.any(near == c)) / len(y)
        check(abs(got - expect) < 1e-12, f"purity np{np_}: {got} vs numpy {expect}")
        check("purity" in p.stdout, "purity not printed")

# Stopping rules: --stop shift (the default, scikit-learn's: the summed squared centre shift <=
# tol x the mean feature variance) stops at the first iteration whose shift, computed here from
# the per-iteration centroids of --max-iter runs, meets it; --stop inertia at the first whose
# relative inertia change does. --products f64 and f32 (the default) give the same clustering
# here (no near ties).
yf = y.astype(np.float32).astype(np.float64)
tol = 1e-3
scale = yf.var(0).mean()
def centroids_after(np_, iters, *extra):
    out = os.path.join(args.workdir, f"stop-{iters}.h5")
    p = run(np_, "kmeans", "--data", labelled, "--k", "3", "--seed", "4", "--init", "random", "--max-iter", str(iters),
            "--tol", "0", *extra, "--out", out)
    check(p.returncode == 0, f"kmeans stop {iters}: {p.stderr.strip()[:300]}")
    with h5py.File(out) as f:
        return np.array(f["centroids"]), int(f.attrs["iterations"]), int(f.attrs["converged"])
p = run(2, "kmeans", "--data", labelled, "--k", "3", "--seed", "4", "--init", "random", "--tol", str(tol),
        "--metrics", os.path.join(args.workdir, "stop.jsonl"), "--out", os.path.join(args.workdir, "stop.h5"))
with h5py.File(os.path.join(args.workdir, "stop.h5")) as f:
    stopped_at, conv = int(f.attrs["iterations"]), int(f.attrs["converged"])
check(conv == 1 and stopped_at >= 2, f"--stop shift: converged {conv} after {stopped_at}")
if stopped_at >= 2:
    runs = [centroids_after(2, i)[0] for i in range(stopped_at - 1, stopped_at + 1)]
    before = centroids_after(2, stopped_at - 2)[0] if stopped_at > 2 else None
    shift_last = ((runs[1] - runs[0]) ** 2).sum()
    check(shift_last <= tol * scale * (1 + 1e-9), f"--stop shift: last shift {shift_last} > {tol * scale}")
    if before is not None:
        shift_prev = ((runs[0] - before) ** 2).sum()
        check(shift_prev > tol * scale, f"--stop shift: stopped late (shift {shift_prev} already met {tol * scale})")
c64 = centroids_after(2, 50, "--products", "f64")[0]
c32 = centroids_after(2, 50, "--products", "f32")[0]
check(np.array_equal(c64, c32), f"--products f64 / f32 differ: {c64} vs {c32}")
p = run(2, "kmeans", "--data", labelled, "--k", "3", "--seed", "4", "--init", "random", "--tol", "1e-9",
        "--stop", "inertia", "--out", os.path.join(args.workdir, "stop-inertia.h5"))
with h5py.File(os.path.join(args.workdir, "stop-inertia.h5")) as f:
    check(int(f.attrs["converged"]) == 1 and f.attrs["stop"] == "inertia", "--stop inertia did not converge")

# ---- bounds: the same bytes as the full pass ---------------------------------------------
# Hamerly's bounds (the default) must give exactly the labels, hence the centroids, of
# --no-bounds, which scores every sample every iteration. The data are made to test the margin:
# 2 clusters offset by 1000 in every coordinate (so ||x|| is large and the products' rounding
# E ~ gamma_d (||x|| + C)^2 is far above the gaps) with a third of the samples on the
# bisector plane up to ~1e-3, whose computed labels are decided by rounding alone.
ties = os.path.join(args.workdir, "ties.h5")
g = np.random.default_rng(7)
left = g.normal(-1.0, 0.3, (1200, 8))
right = g.normal(1.0, 0.3, (1200, 8))
mid = g.normal(0.0, 0.3, (1200, 8))
mid[:, 0] = g.normal(0.0, 1e-3, 1200)  # the bisector of centres near -1 and +1 along column 0
left[:, 0] -= 1.0
right[:, 0] += 1.0
t = np.concatenate([left, right, mid]) + 1000.0
g.shuffle(t)
write_dataset(ties, t)
for np_ in (1, 3):
    for products in ("f32", "f64"):
        got = {}
        for mode in ("bounds", "full"):
            out = os.path.join(args.workdir, f"ties-{np_}-{products}-{mode}.h5")
            extra = ["--no-bounds"] if mode == "full" else []
            p = run(np_, "kmeans", "--data", ties, "--k", "4", "--seed", "2", "--products", products, "--tol", "0",
                    "--max-iter", "40", *extra, "--out", out)
            check(p.returncode == 0, f"ties {mode} np{np_} {products}: {p.stderr.strip()[:300]}")
            if p.returncode == 0:
                with h5py.File(out) as f:
                    got[mode] = (np.array(f["centroids"]).tobytes(), int(f.attrs["iterations"]))
        if len(got) == 2:
            check(got["bounds"] == got["full"],
                  f"ties np{np_} {products}: bounds and --no-bounds differ (iterations {got['bounds'][1]} vs {got['full'][1]})")

# ---- bad input --------------------------------------------------------------------------
bad = os.path.join(args.workdir, "nan.h5")
z = x.copy()
z[1234, 2] = np.nan
write_dataset(bad, z)
for np_, cmd, needle in [
    (2, ["--data", exact, "--k", str(len(x) + 1)], "exceeds the number of samples"),
    (2, ["--data", exact, "--k", "0"], "at least 1"),
    (2, ["--data", bad, "--k", "3"], "sample 1234 column 2 is nan"),
    (2, ["--data", exact, "--k", "3", "--init-rounds", "0"], "--init-rounds must be at least 1"),
    (2, ["--data", exact, "--k", "3", "--oversampling", "-1"], "--oversampling must be > 0"),
]:
    p = run(np_, "kmeans", *cmd, "--out", os.path.join(args.workdir, "bad.h5"))
    check(p.returncode != 0, f"{cmd}: exit 0")
    check(needle in p.stderr, f"{cmd}: stderr lacks {needle!r}: {p.stderr.strip()[:400]}")
check(not os.path.exists(os.path.join(args.workdir, "bad.h5")), "a failed fit left a model file")

finish()
