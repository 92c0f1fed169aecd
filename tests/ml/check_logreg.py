#!/usr/bin/env python3
"""`hpctrain ml logreg` through mpirun on real HDF5 files (tests/ml/CMakeLists.txt).

Known answer: three well-separated blobs: training accuracy 100 %. Against scikit-learn
(Debian's python3-sklearn, an independent L-BFGS implementation) on overlapping classes:
LogisticRegression(C = 1/(n l2)) fitted to a tight tolerance; hpctrain's objective, evaluated
here in float64 numpy from the coefficients it wrote, within 1e-5 relative of scikit-learn's
optimum, W within 1e-3, intercepts within 1e-3 after removing their mean (softmax intercepts
are defined only up to a common shift). /coefficients and /intercept bytes identical at
np 1..4; --eval-data's accuracy equal to numpy's argmax on the test file; --metrics records.
Bad input: no /labels, `classes` < 2, a label outside [0, classes), NaN in the data, l2 < 0:
one clear error each, non-zero exit, no model file.
"""
import json
import os
import h5py
import numpy as np
from sklearn.linear_model import LogisticRegression

from ml_test_support import args, check, finish, run_ml, write_dataset


def run(np_, *cmd):
    return run_ml(np_, "logreg", *cmd)


def fit(np_, data, *extra):
    out = os.path.join(args.workdir, f"model-np{np_}.h5")
    p = run(np_, "--data", data, "--out", out, *extra)
    check(p.returncode == 0, f"logreg {data} np{np_} {extra}: exit {p.returncode}: {p.stderr.strip()[:400]}")
    if p.returncode:
        return None
    with h5py.File(out) as f:
        check(f.attrs["model"] == "logreg", "model attribute")
        return (np.array(f["coefficients"]), np.array(f["intercept"]), dict(f.attrs), p.stdout)


def objective(x, y, w, b, lam):
    z = x @ w.T + b
    z -= z.max(1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(1, keepdims=True))
    return -logp[np.arange(len(y)), y].mean() + 0.5 * lam * (w * w).sum()


def f32(x):
    return x.astype(np.float32).astype(np.float64)  # what the file stores


rng = np.random.default_rng(5)

# Known answer: separable blobs.
centres = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
ys = rng.integers(0, 3, 2500)
xs = centres[ys] + rng.normal(0, 1, (2500, 2))
sep = os.path.join(args.workdir, "separable.h5")
write_dataset(sep, xs, labels=ys, classes=3)
r = fit(2, sep, "--l2", "1e-6")
if r:
    check(abs(r[2]["train_accuracy"] - 1.0) < 1e-12, f"separable: train accuracy {r[2]['train_accuracy']}")

# Against scikit-learn: overlapping classes, 3000 samples (3 sum blocks), 6 features, 4 classes.
n, d, c, lam = 3000, 6, 4, 1e-3
w_true = rng.normal(0, 1, (c, d))
x = f32(rng.normal(0, 1, (n, d)) * [1, 2, 0.5, 1, 3, 1] + [0, 1, 0, -1, 0, 2])
y = np.array([rng.choice(c, p=np.exp(v) / np.exp(v).sum()) for v in x @ w_true.T])
xt = f32(rng.normal(0, 1, (700, d)) * [1, 2, 0.5, 1, 3, 1] + [0, 1, 0, -1, 0, 2])
yt = np.array([rng.choice(c, p=np.exp(v) / np.exp(v).sum()) for v in xt @ w_true.T])
train = os.path.join(args.workdir, "train.h5")
test = os.path.join(args.workdir, "test.h5")
write_dataset(train, x, labels=y, classes=c)
write_dataset(test, xt, labels=yt, classes=c)
sk = LogisticRegression(C=1.0 / (n * lam), tol=1e-12, max_iter=100000, multi_class="multinomial").fit(x, y)
f_ref = objective(x, y, sk.coef_, sk.intercept_, lam)

metrics = os.path.join(args.workdir, "metrics.jsonl")
bytes_by_np = {}
for np_ in (1, 2, 3, 4):
    extra = ["--l2", str(lam), "--tol", "1e-9", "--eval-data", test, "--products", "f64"]
    if np_ == 2:
        extra += ["--metrics", metrics]
    r = fit(np_, train, *extra)
    if not r:
        continue
    w, b, attrs, out = r
    bytes_by_np[np_] = w.tobytes() + b.tobytes() + attrs["data_checksum"].encode()
    f = objective(x, y, w, b, lam)
    check(f <= f_ref * (1 + 1e-5), f"np{np_}: objective {f!r} vs scikit-learn {f_ref!r}")
    check(abs(attrs["objective"] - f) <= 1e-9 * f, f"np{np_}: recorded objective {attrs['objective']} vs {f}")
    check(np.allclose(w, sk.coef_, rtol=0, atol=1e-3), f"np{np_}: W {w} vs {sk.coef_}")
    check(np.allclose(b - b.mean(), sk.intercept_ - sk.intercept_.mean(), rtol=0, atol=1e-3),
          f"np{np_}: b {b} vs {sk.intercept_}")
    acc_test = np.mean(np.argmax(xt @ w.T + b, 1) == yt)
    check(abs(attrs["test_accuracy"] - acc_test) < 1e-12, f"np{np_}: test accuracy {attrs['test_accuracy']} vs {acc_test}")
    check(abs(acc_test - sk.score(xt, yt)) <= 0.002, f"np{np_}: test accuracy {acc_test} vs sklearn {sk.score(xt, yt)}")
check(len(bytes_by_np) == 4 and len(set(bytes_by_np.values())) == 1,
      "/coefficients bytes or the data checksum differ over np 1..4")
# --products f32 (the default): single-precision products, same objective to 1e-5 of
# scikit-learn's optimum, same bytes at np 1 and 3 (np 3 with the flag, np 1 by default).
f32_bytes = {}
for np_ in (1, 3):
    r = fit(np_, train, "--l2", str(lam), "--tol", "1e-9", *(["--products", "f32"] if np_ == 3 else []))
    if r:
        f32_bytes[np_] = r[0].tobytes() + r[1].tobytes()
        check(objective(x, y, r[0], r[1], lam) <= f_ref * (1 + 1e-5),
              f"f32 np{np_}: objective {objective(x, y, r[0], r[1], lam)!r} vs scikit-learn {f_ref!r}")
check(len(f32_bytes) == 2 and len(set(f32_bytes.values())) == 1, "f32: bytes differ between np 1 and 3")
r_test = fit(2, test, "--l2", str(lam))
if r_test and r:
    check(r_test[2]["data_checksum"] != r[2]["data_checksum"] and r[2]["data_checksum"].startswith("xxh3:"),
          f"data checksums {r_test[2]['data_checksum']} / {r[2]['data_checksum']}")

# --standardize: features on very different scales; the stored scaling is numpy's population
# mean and std, and the fit in standardised units matches scikit-learn on numpy-standardised data.
xs2 = f32(x * [1e3, 1e-3, 1, 50, 1, 1e2])
scaled = os.path.join(args.workdir, "scaled.h5")
write_dataset(scaled, xs2, labels=y, classes=c)
r = fit(3, scaled, "--l2", str(lam), "--tol", "1e-9", "--standardize")
if r:
    with h5py.File(os.path.join(args.workdir, "model-np3.h5")) as f:
        mean, std = np.array(f["standardize_mean"]), np.array(f["standardize_std"])
    check(np.allclose(mean, xs2.mean(0), rtol=1e-12, atol=1e-12) and np.allclose(std, xs2.std(0), rtol=1e-12),
          f"--standardize: mean {mean} std {std} vs numpy {xs2.mean(0)} {xs2.std(0)}")
    z = (xs2 - xs2.mean(0)) / xs2.std(0)
    sk2 = LogisticRegression(C=1.0 / (n * lam), tol=1e-12, max_iter=100000).fit(z, y)
    check(objective(z, y, r[0], r[1], lam) <= objective(z, y, sk2.coef_, sk2.intercept_, lam) * (1 + 1e-5),
          "--standardize: objective above scikit-learn's on standardised data")
if os.path.exists(metrics):
    recs = [json.loads(line) for line in open(metrics)]
    its = [r for r in recs if r["type"] == "iteration"]
    check(len(its) >= 5 and [r["iteration"] for r in its] == list(range(1, len(its) + 1)), f"iteration records {its[:3]}")
    check(recs[-1]["type"] == "summary" and "test_accuracy" in recs[-1] and "train_accuracy" in recs[-1],
          f"summary record {recs[-1]}")
    check(all(its[i + 1]["objective"] <= its[i]["objective"] for i in range(len(its) - 1)), "objective rises")
else:
    check(False, "--metrics file missing")

# The stopping rule is scikit-learn's: max |g_i| <= tol over (W, b). The gradient of the written
# model, computed here in float64, meets it; the fit stopped at the first iteration whose
# recorded max |g_i| met it; and scikit-learn at the same tol stops near the same objective.
def gradient(x, y, w, b, lam):
    z = x @ w.T + b
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    p[np.arange(len(y)), y] -= 1.0
    return np.concatenate([(p.T @ x / len(y) + lam * w).ravel(), p.mean(0)])


rule_metrics = os.path.join(args.workdir, "rule.jsonl")
for tol in (1e-3, 1e-5):
    r = fit(2, train, "--l2", str(lam), "--tol", str(tol), "--products", "f64", "--metrics", rule_metrics)
    if not r:
        continue
    g = np.abs(gradient(x, y, r[0], r[1], lam)).max()
    check(r[2]["converged"] == 1 and g <= tol * (1 + 1e-6), f"tol {tol}: converged {r[2]['converged']}, max|g| {g}")
    its = [json.loads(line) for line in open(rule_metrics)]
    its = [i for i in its if i["type"] == "iteration"]
    check(its and its[-1]["gradient_max_abs"] <= tol and all(i["gradient_max_abs"] > tol for i in its[:-1]),
          f"tol {tol}: did not stop at the first iteration meeting the rule: {[i['gradient_max_abs'] for i in its]}")
    check(abs(its[-1]["gradient_max_abs"] - g) <= 1e-9 + 1e-6 * g, f"tol {tol}: recorded {its[-1]['gradient_max_abs']} vs {g}")
    check(all(its[i + 1]["seconds"] >= its[i]["seconds"] >= 0 for i in range(len(its) - 1)), "iteration seconds")
    sk_t = LogisticRegression(C=1.0 / (n * lam), tol=tol, max_iter=100000).fit(x, y)
    f_sk, f_h = objective(x, y, sk_t.coef_, sk_t.intercept_, lam), objective(x, y, r[0], r[1], lam)
    check(abs(f_h - f_sk) <= 10 * tol * abs(f_sk), f"tol {tol}: objective {f_h} vs scikit-learn's {f_sk} at the same tol")

# Bad input.
nolabels = os.path.join(args.workdir, "nolabels.h5")
write_dataset(nolabels, x, labels=False)
oneclass = os.path.join(args.workdir, "oneclass.h5")
write_dataset(oneclass, x, labels=np.zeros(n, np.int32), classes=1)
outside = os.path.join(args.workdir, "outside.h5")
yo = y.copy()
yo[1234] = 7
write_dataset(outside, x, labels=yo, classes=c)
nan = os.path.join(args.workdir, "nan.h5")
xn = x.copy()
xn[2000, 3] = np.nan
write_dataset(nan, xn, labels=y, classes=c)
bad = os.path.join(args.workdir, "bad.h5")
for data, extra, needle in [(nolabels, [], "/labels: dataset is missing"),
                            (oneclass, [], "`classes` is 1"),
                            (outside, [], "label of sample 1234 is 7, outside [0, 4)"),
                            (nan, [], "sample 2000 column 3 is nan"),
                            (train, ["--l2", "-1"], "--l2 must be >= 0")]:
    p = run(2, "--data", data, "--out", bad, *extra)
    check(p.returncode != 0, f"{data} {extra}: exit 0")
    check(needle in p.stderr, f"{data} {extra}: stderr lacks {needle!r}: {p.stderr.strip()[:400]}")
    check(p.stderr.count(needle) == 1, f"{data} {extra}: the cause is printed {p.stderr.count(needle)} times")
check(not os.path.exists(bad), "a failed fit left a model file")

finish()
