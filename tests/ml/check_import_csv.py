#!/usr/bin/env python3
"""`hpctrain data import-csv` (tests/ml/CMakeLists.txt): a regression CSV (--target) and a
classification CSV, 5000 rows (two 4096-row write chunks, the second partial); the
values, /targets, /labels and attributes are checked with h5py, the regression file is fitted
by `hpctrain ml linreg` at np 2 (exact coefficients) and the classification file read by
`hpctrain ml kmeans`. Bad input: a non-numeric cell (line and column named), a missing label
column, a non-integer label; no output file is left behind."""
import os, subprocess
import h5py
import numpy as np

from ml_test_support import args, check, finish, run_ml

rng = np.random.default_rng(5)
n = 5000
x = rng.integers(-20, 20, (n, 3)).astype(np.float64) / 4
y = x @ [2.0, -1.0, 0.5] + 3.0
lab = rng.integers(0, 4, n)


def write_csv(path, header, cols, bad=None):
    with open(path, "w") as f:
        f.write(",".join(header) + "\n")
        for i in range(n):
            cells = [repr(float(c[i])) if c.dtype.kind == "f" else str(c[i]) for c in cols]
            if bad and bad[0] == i:
                cells[bad[1]] = bad[2]
            f.write(",".join(cells) + "\n")


def import_csv(*cmd):
    full = [args.mpiexec, "-n", "2"] + [f for f in args.mpiexec_flag if f] + [args.hpctrain, "data", "import-csv"] + list(cmd)
    return subprocess.run(full, capture_output=True, text=True, timeout=120)


w = args.workdir
reg_csv, cls_csv = os.path.join(w, "reg.csv"), os.path.join(w, "cls.csv")
write_csv(reg_csv, ["a", "y", "b", "c"], [x[:, 0], y, x[:, 1], x[:, 2]])
write_csv(cls_csv, ["a", "b", "c", "kind"], [x[:, 0], x[:, 1], x[:, 2], lab])
reg, cls = os.path.join(w, "reg.h5"), os.path.join(w, "cls.h5")
p = import_csv("--csv", reg_csv, "--label-column", "y", "--target", "--out", reg)
check(p.returncode == 0, f"import reg: {p.stderr.strip()}")
p = import_csv("--csv", cls_csv, "--label-column", "kind", "--out", cls)
check(p.returncode == 0, f"import cls: {p.stderr.strip()}")
if os.path.exists(reg) and os.path.exists(cls):
    with h5py.File(reg) as f:
        check(f["samples"].dtype == np.float32 and np.array_equal(np.array(f["samples"]), x.astype(np.float32)), "reg samples")
        check(np.array_equal(np.array(f["targets"]), y), "reg targets")
        check(list(f.attrs["feature_names"]) == ["a", "b", "c"], f"feature names {f.attrs['feature_names']}")
        check(f.attrs["count"] == n and list(f.attrs["shape"]) == [3], "count/shape")
    with h5py.File(cls) as f:
        check(np.array_equal(np.array(f["labels"]), lab) and f["labels"].dtype == np.int32, "labels")
        check(f.attrs["classes"] == 4 and f.attrs["format"] == "hpctrain-dataset", "classes/format")
        check(np.array(f["samples"]).shape == (n, 3) and f["samples"].attrs["scale"] == 1.0, "samples shape/scale")
    out = os.path.join(w, "reg-model.h5")
    p = run_ml(2, "linreg", "--data", reg, "--out", out)
    check(p.returncode == 0, f"linreg on the import: {p.stderr.strip()}")
    if p.returncode == 0:
        with h5py.File(out) as f:
            check(np.allclose(np.array(f["coefficients"]), [2.0, -1.0, 0.5], atol=1e-9, rtol=0)
                  and abs(f.attrs["intercept"] - 3.0) < 1e-9, "linreg coefficients of the import")
    p = run_ml(2, "kmeans", "--data", cls, "--k", "4", "--out", os.path.join(w, "cls-model.h5"))
    check(p.returncode == 0, f"kmeans on the import: {p.stderr.strip()}")

bad_csv = os.path.join(w, "bad.csv")
write_csv(bad_csv, ["a", "y", "b", "c"], [x[:, 0], y, x[:, 1], x[:, 2]], bad=(4500, 2, "abc"))
bad_out = os.path.join(w, "bad.h5")
for cmd, needle in [
    (["--csv", bad_csv, "--label-column", "y", "--target"], "line 4502, column 3 ('b'): 'abc' is not a finite number"),
    (["--csv", reg_csv, "--label-column", "nope"], "no column named 'nope'"),
    (["--csv", reg_csv, "--label-column", "a"], "is not an integer >= 0"),
]:
    p = import_csv(*cmd, "--out", bad_out)
    check(p.returncode != 0, f"{cmd}: exit 0")
    check(needle in p.stderr, f"{cmd}: stderr lacks {needle!r}: {p.stderr.strip()[:400]}")
check(not os.path.exists(bad_out) and not any(".tmp-" in f for f in os.listdir(w)), "a failed import left a file")
finish()
