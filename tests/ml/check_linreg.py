#!/usr/bin/env python3
"""`hpctrain ml linreg` through mpirun on real HDF5 files (tests/ml/CMakeLists.txt).

Known answer: y = X w + b exactly (small integers, so X w + b is exact in float64) over 3000
samples (3 sum blocks): w and b recovered to 1e-9, training mse ~ 0. Noisy data: w, b within
1e-6 relative of numpy.linalg.lstsq, and with --l2 of the closed-form ridge solution;
/coefficients bytes identical at np 1, 2, 3, 4. The same for rows sorted by y with a column
offset by 10^6 (the normal solver's shift by the first block's mean, then exact centring). Bad
input: a constant column, a column that is a sum of two others, no /targets: one clear error
naming the column, non-zero exit.
"""
import os
import h5py
import numpy as np

from ml_test_support import args, check, finish, run_ml, write_dataset


def run(np_, *cmd):
    return run_ml(np_, "linreg", *cmd)


def fit(np_, data, *extra):
    out = os.path.join(args.workdir, f"model-np{np_}.h5")
    p = run(np_, "--data", data, "--out", out, *extra)
    check(p.returncode == 0, f"linreg {data} np{np_} {extra}: exit {p.returncode}: {p.stderr.strip()[:400]}")
    if p.returncode:
        return None
    with h5py.File(out) as f:
        check(f.attrs["model"] == "linreg", "model attribute")
        return np.array(f["coefficients"]), float(f.attrs["intercept"]), float(f.attrs["mse"])


rng = np.random.default_rng(3)
n, d = 3000, 4
x = rng.integers(-50, 50, (n, d)).astype(np.float64)
w_true = np.array([1.5, -2.0, 0.25, 3.0])
b_true = 7.0
exact = os.path.join(args.workdir, "exact.h5")
write_dataset(exact, x, x @ w_true + b_true)
noisy = os.path.join(args.workdir, "noisy.h5")
xn = rng.normal(0, 1, (n, d)).astype(np.float32).astype(np.float64) * [1, 10, 0.1, 3] + [5, -2, 0, 100]
yn = xn @ w_true + b_true + rng.normal(0, 0.5, n)
write_dataset(noisy, xn, yn)
a = np.hstack([xn, np.ones((n, 1))])
ref = np.linalg.lstsq(a, yn, rcond=None)[0]
lam = 0.3
xc, yc = xn - xn.mean(0), yn - yn.mean()
ridge_w = np.linalg.solve(xc.T @ xc / n + lam * np.eye(d), xc.T @ yc / n)
ridge_b = yn.mean() - xn.mean(0) @ ridge_w

bytes_by_np = {}
for np_ in (1, 2, 3, 4):
    r = fit(np_, exact)
    if r:
        check(np.allclose(r[0], w_true, rtol=0, atol=1e-9) and abs(r[1] - b_true) < 1e-9, f"exact np{np_}: {r}")
        check(r[2] < 1e-18, f"exact np{np_}: mse {r[2]}")
    r = fit(np_, noisy)
    if r:
        bytes_by_np[np_] = r[0].tobytes() + np.float64(r[1]).tobytes()
        check(np.allclose(r[0], ref[:d], rtol=1e-6, atol=0) and abs(r[1] - ref[d]) <= 1e-6 * abs(ref[d]),
              f"noisy np{np_}: {r[0]} {r[1]} vs lstsq {ref}")
    r = fit(np_, noisy, "--l2", str(lam))
    if r:
        check(np.allclose(r[0], ridge_w, rtol=1e-6) and abs(r[1] - ridge_b) <= 1e-6 * abs(ridge_b),
              f"ridge np{np_}: {r[0]} vs {ridge_w}")
check(len(bytes_by_np) == 4 and len(set(bytes_by_np.values())) == 1, "/coefficients bytes differ over np 1..4")

# The normal solver shifts every column by its mean over the first sum block (samples 0..1023),
# then centres exactly: rows sorted by y (that block holds the smallest targets, far from the
# mean) and column 0 offset by 10^6 (unshifted sums would lose ~12 of the 16 digits) still give
# lstsq's answer, the same bytes at np 1..4 (at np 4 rank 0 owns no block: another rank sends the shift).
order = np.argsort(yn)
xs, ys = (xn[order] + [1e6, 0, 0, 0]).astype(np.float32).astype(np.float64), yn[order]  # as stored
shifted = os.path.join(args.workdir, "sorted.h5")
write_dataset(shifted, xs, ys)
ref_s = np.linalg.lstsq(np.hstack([xs, np.ones((n, 1))]), ys, rcond=None)[0]
sorted_bytes = {}
for np_ in (1, 2, 4):
    r = fit(np_, shifted)
    if r:
        sorted_bytes[np_] = r[0].tobytes() + np.float64(r[1]).tobytes()
        check(np.allclose(r[0], ref_s[:d], rtol=1e-6, atol=0) and abs(r[1] - ref_s[d]) <= 1e-6 * abs(ref_s[d]),
              f"sorted np{np_}: {r[0]} {r[1]} vs lstsq {ref_s}")
check(len(sorted_bytes) == 3 and len(set(sorted_bytes.values())) == 1, "sorted: bytes differ over np 1, 2, 4")

# --solver lbfgs: the same minimiser (lstsq; the ridge solution with --l2), same bytes at np 1..4.
lbfgs_bytes = {}
for np_ in (1, 2, 3, 4):
    r = fit(np_, noisy, "--solver", "lbfgs", "--tol", "1e-13", "--max-iter", "2000")
    if r:
        lbfgs_bytes[np_] = r[0].tobytes() + np.float64(r[1]).tobytes()
        check(np.allclose(r[0], ref[:d], rtol=1e-6, atol=0) and abs(r[1] - ref[d]) <= 1e-6 * abs(ref[d]),
              f"lbfgs np{np_}: {r[0]} {r[1]} vs lstsq {ref}")
check(len(lbfgs_bytes) == 4 and len(set(lbfgs_bytes.values())) == 1, "lbfgs: bytes differ over np 1..4")
r = fit(2, noisy, "--solver", "lbfgs", "--tol", "1e-13", "--max-iter", "2000", "--l2", str(lam))
if r:
    check(np.allclose(r[0], ridge_w, rtol=1e-6) and abs(r[1] - ridge_b) <= 1e-6 * abs(ridge_b),
          f"lbfgs ridge: {r[0]} vs {ridge_w}")

const = os.path.join(args.workdir, "constant.h5")
xk = x.copy()
xk[:, 2] = 4.0
write_dataset(const, xk, xk @ w_true, names=["a", "b", "c", "d"])
dep = os.path.join(args.workdir, "dependent.h5")
xd = x.copy()
xd[:, 3] = xd[:, 0] + xd[:, 1]
write_dataset(dep, xd, xd @ w_true)
notargets = os.path.join(args.workdir, "notargets.h5")
write_dataset(notargets, x, labels=False)
for data, needle in [(const, "column 2 ('c') is constant"), (dep, "singular at column 3"),
                     (notargets, "/targets: dataset is missing")]:
    p = run(2, "--data", data, "--out", os.path.join(args.workdir, "bad.h5"))
    check(p.returncode != 0, f"{data}: exit 0")
    check(needle in p.stderr, f"{data}: stderr lacks {needle!r}: {p.stderr.strip()[:400]}")
check(not os.path.exists(os.path.join(args.workdir, "bad.h5")), "a failed fit left a model file")

finish()
