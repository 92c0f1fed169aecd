#!/usr/bin/python3
"""End-to-end test of scripts/scaling-study at a small size (ctest label `study`).

  study_test.py --repo SRC --bin BUILD/bin --work DIR

run (ranks 1,2; all-reduce 8 B..64 KiB, 3 iterations; 8 training steps of mlp and cnn on a
2048-sample subset, strong and weak), then report, then project twice (fitted parameters; given
network parameters). Checks that every expected JSON/CSV/PNG exists and parses and that the
tables' numbers are the JSON's: busbw, one efficiency and one projected point are recomputed.
Exit 77 (ctest skip) when matplotlib is missing: the plots are part of what is tested.
"""

import argparse
import csv
import json
import math
import os
import shutil
import subprocess
import sys


def fail(msg):
    print(f"study_test: FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def run(cmd, **kw):
    print("study_test: " + " ".join(cmd), flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        fail(f"exit {r.returncode}: {' '.join(cmd)}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return r.stdout


def rows_of(path):
    if not os.path.exists(path):
        fail(f"{path} missing")
    with open(path) as f:
        rows = list(csv.DictReader(f))
    if not rows:
        fail(f"{path}: no rows")
    return rows


def close(a, b, rel=1e-4):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-30)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", required=True)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("study_test: matplotlib missing (apt-get install python3-matplotlib): skipped")
        sys.exit(77)
    study = os.path.join(a.repo, "scripts", "scaling-study")
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    data = os.path.join(a.work, "small.h5")
    run([os.path.join(a.bin, "hpctrain"), "data", "import-idx", "--limit", "2048", "--fashion-mnist",
         "--images", "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz",
         "--labels", "/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz", "--out", data])
    out = os.path.join(a.work, "results")
    run([study, "run", "--ranks", "1,2", "--max-bytes", "64K", "--step", "4", "--iters", "3", "--steps", "8",
         "--global-batch", "128", "--per-rank-batch", "32", "--data", data, "--bin-dir", a.bin, "--out", out])

    # ---- what `run` leaves
    machine = json.load(open(os.path.join(out, "machine.json")))
    for key in ("cpu_model", "logical_cpus", "memory_GiB", "mpi_version", "ucx_version", "hpctrain_git", "env", "bounds"):
        if key not in machine:
            fail(f"machine.json lacks {key}")
    if not machine["bounds"].get("memcpy_GBps"):
        fail("machine.json: no measured memcpy bound")
    ar = json.load(open(os.path.join(out, "allreduce-p2.json")))
    benches = [b for b in ar["benchmarks"] if b.get("run_type", "iteration") == "iteration"]
    if not benches or any(b.get("error_occurred") for b in benches):
        fail("allreduce-p2.json: no benchmarks or an errored one")
    if any(not b.get("bound_GBps") or b["bound_GBps"] <= 0 for b in benches):
        fail("allreduce-p2.json: a benchmark without its bound_GBps counter")
    summaries = {}
    for mode in ("strong", "weak"):
        for model in ("mlp", "cnn"):
            for p in (1, 2):
                path = os.path.join(out, f"train-{mode}-{model}-p{p}.jsonl")
                if not os.path.exists(path):
                    fail(f"{path} missing")
                lines = [json.loads(line) for line in open(path) if line.strip()]
                s = [x for x in lines if x.get("type") == "summary"]
                if not s or s[-1]["ranks"] != p or s[-1]["samples_per_s"] <= 0:
                    fail(f"{path}: no valid summary")
                summaries[(mode, model, p)] = s[-1]

    # ---- project (fitted and given), then report (which includes the projection)
    run([study, "project", "--from", out, "--ranks-per-node", "2", "--ranks", "16,64,4096"])
    given = os.path.join(a.work, "given")
    run([study, "project", "--from", out, "--ranks-per-node", "4", "--alpha-us", "2", "--beta-GBps", "12.5",
         "--gamma-GBps", "10", "--ranks", "16,4096", "--out", given])
    run([study, "report", out])

    for name in ("report.md", "allreduce.csv", "training.csv", "projection.csv", "projection.md", "projection.json",
                 "allreduce-busbw-p2.png", "train-strong-scaling.png", "train-weak-scaling.png",
                 "train-strong-step-split.png", "train-weak-step-split.png", "projection.png"):
        path = os.path.join(out, name)
        if not os.path.exists(path) or os.path.getsize(path) == 0:
            fail(f"{path} missing or empty")
        if name.endswith(".png") and open(path, "rb").read(8) != b"\x89PNG\r\n\x1a\n":
            fail(f"{path} is not a PNG")
    report = open(os.path.join(out, "report.md")).read()
    for needle in ("## Machine", "## Bounds", "## All-reduce", "## Training throughput", "model, not a measurement"):
        if needle not in report:
            fail(f"report.md lacks '{needle}'")

    # ---- the tables' numbers are the JSON's
    csv_ar = rows_of(os.path.join(out, "allreduce.csv"))
    for b in benches:
        row = [r for r in csv_ar if r["algorithm"] == b["label"] and int(r["bytes"]) == int(b["bytes"])]
        if len(row) != 1 or not close(float(row[0]["busbw_GBps"]), b["busbw"]):
            fail(f"allreduce.csv disagrees with the JSON at {b['name']}")
    csv_tr = rows_of(os.path.join(out, "training.csv"))
    if len(csv_tr) != 8:
        fail(f"training.csv: {len(csv_tr)} rows, expected 8")
    for mode, model in (("strong", "mlp"), ("weak", "cnn")):
        s1, s2 = summaries[(mode, model, 1)], summaries[(mode, model, 2)]
        eff = s2["samples_per_s"] / (2 * s1["samples_per_s"])
        row = [r for r in csv_tr if r["mode"] == mode and r["model"] == model and r["ranks"] == "2"][0]
        if not close(float(row["efficiency"]), eff):
            fail(f"training.csv {mode} {model} P=2 efficiency {row['efficiency']} != recomputed {eff:.6g}")
        if f"{eff:.2f}" not in report:
            fail(f"report.md lacks the {mode} {model} efficiency {eff:.2f}")

    # projection with given parameters: mlp ring at 4096 ranks, 4 per node, recomputed here
    proj = json.load(open(os.path.join(given, "projection.json")))
    m = proj["params"]["models"]["mlp"]
    p, n = 4096, 4 * 535818
    t_ar = 2 * (p - 1) * 2e-6 + 2 * (p - 1) / p * n / 12.5e9 + (p - 1) / p * n / 10e9
    want = p * m["batch"] / (m["t_local_s"] + t_ar)
    row = [r for r in rows_of(os.path.join(given, "projection.csv"))
           if r["model"] == "mlp" and r["algorithm"] == "ring" and r["ranks"] == "4096"][0]
    if not close(float(row["samples_per_s"]), want):
        fail(f"projection mlp ring 4096: {row['samples_per_s']} != recomputed {want:.6g}")
    lg = math.ceil(math.log2(p))
    t_tree = 2 * lg * (2e-6 + n / 12.5e9) + lg * n / 10e9
    row = [r for r in rows_of(os.path.join(given, "projection.csv"))
           if r["model"] == "mlp" and r["algorithm"] == "tree" and r["ranks"] == "4096"][0]
    if not close(float(row["t_allreduce_ms"]), 1e3 * t_tree):
        fail(f"projection mlp tree 4096 all-reduce {row['t_allreduce_ms']} ms != recomputed {1e3 * t_tree:.6g}")
    print("study_test: OK")


if __name__ == "__main__":
    main()
