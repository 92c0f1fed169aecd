#!/usr/bin/python3
"""`hpctrain tune-collectives` end to end: at np 2 (--quick) it must write a tuning file whose
cost-model parameters are all positive finite numbers and print a prediction table; the
predict-only mode (no mpirun) must print one row per node count and size with exactly one winner,
numbers that follow the ring formula recomputed here from the file, and bad input must fail
naming the file/flag.

  check_tune_collectives.py --hpctrain PATH --mpiexec PATH --workdir DIR [--mpiexec-flag F ...]
"""
import argparse
import json
import math
import os
import re
import subprocess
import sys

MODEL_KEYS = ["alpha_intra_s", "beta_intra_s_per_byte", "alpha_inter_s", "beta_inter_s_per_byte",
              "gamma_s_per_byte", "shm_beta_s_per_byte", "shm_sync_s"]
ALGOS = ["ring", "tree", "recursive_doubling", "rabenseifner", "shm", "hierarchical"]
SIZES = {"8 B": 8, "64 KiB": 64 << 10, "1 MiB": 1 << 20, "64 MiB": 64 << 20}


def fail(msg, proc=None):
    sys.stderr.write(f"check_tune_collectives: FAIL: {msg}\n")
    if proc is not None:
        sys.stderr.write("---- stdout ----\n" + proc.stdout[-6000:] + "\n---- stderr ----\n" + proc.stderr[-3000:] + "\n")
    sys.exit(1)


# The checks assume the defaults: the caller's collectives settings must not leak in.
ENV = {k: v for k, v in os.environ.items()
       if k not in ("HPCTRAIN_TUNING_FILE", "HPCTRAIN_AUTO_ALGOS", "HPCTRAIN_ALLREDUCE_ALGO", "HPCTRAIN_RANKS_PER_NODE")}


def run(cmd, expect_ok=True):
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=ENV)
    if expect_ok and proc.returncode != 0:
        fail(f"exit {proc.returncode}: {' '.join(cmd)}", proc)
    if not expect_ok and proc.returncode == 0:
        fail(f"exit 0, expected an error: {' '.join(cmd)}", proc)
    return proc


def table_rows(text):
    """(size, nodes, ranks, {algo: value or None, starred}, choice) for every table row."""
    rows = []
    pat = re.compile(r"^\s*(\d+ (?:B|KiB|MiB|GiB))\s+(\d+)\s+(\d+)\s+(.*)\s+(\w+)\s*$")
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = pat.match(line)
        if not m:
            continue
        cells = re.findall(r"(-|\d+\.\d\*?)", m.group(4))
        if len(cells) != len(ALGOS):
            fail(f"table row with {len(cells)} cells, expected {len(ALGOS)}: {line!r}")
        values = {}
        starred = []
        for algo, c in zip(ALGOS, cells):
            values[algo] = None if c == "-" else float(c.rstrip("*"))
            if c.endswith("*"):
                starred.append(algo)
        rows.append((m.group(1), int(m.group(2)), int(m.group(3)), values, starred, m.group(5)))
    return rows


def check_table(text, ranks_per_node, nodes_max):
    rows = table_rows(text)
    nodes = []
    n = 1
    while n <= nodes_max:
        nodes.append(n)
        n *= 2
    if len(rows) != len(nodes) * len(SIZES):
        fail(f"expected {len(nodes) * len(SIZES)} table rows (nodes {nodes} x {list(SIZES)}), got {len(rows)}:\n{text}")
    for size, nn, ranks, values, starred, choice in rows:
        if ranks != nn * ranks_per_node:
            fail(f"row {size} {nn}: ranks {ranks} != nodes x {ranks_per_node}")
        if len(starred) != 1 or starred[0] != choice:
            fail(f"row {size} {nn}: winner marks {starred}, choice {choice}")
        finite = {a: v for a, v in values.items() if v is not None}
        if values[choice] != min(finite.values()):
            fail(f"row {size} {nn}: choice {choice} ({values[choice]}) is not the smallest of {finite}")
        if (values["shm"] is None) != (nn > 1):
            fail(f"row {size} {nn}: shm must be modelled on one node only")
        if (values["hierarchical"] is None) != (nn == 1 or ranks_per_node == 1):
            fail(f"row {size} {nn}: hierarchical must be modelled on >= 2 nodes of > 1 rank only")
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hpctrain", required=True)
    ap.add_argument("--mpiexec", required=True)
    ap.add_argument("--mpiexec-flag", action="append", default=[])
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    out = os.path.join(a.workdir, "tuning.json")
    if os.path.exists(out):
        os.remove(out)

    # 1. Measure at np 2.
    proc = run([a.mpiexec, "-n", "2"] + a.mpiexec_flag + [a.hpctrain, "tune-collectives", "--quick", "--output", out,
                                                          "--predict-ranks-per-node", "2", "--predict-nodes-max", "8"])
    for word in ["alpha_intra", "beta_intra", "gamma", "shm copy", "wrote " + out]:
        if word not in proc.stdout:
            fail(f"'{word}' missing from the output", proc)
    check_table(proc.stdout, 2, 8)
    with open(out) as f:
        doc = json.load(f)
    if doc.get("schema_version") != 1:
        fail(f"schema_version {doc.get('schema_version')}")
    model = doc.get("model", {})
    for k in MODEL_KEYS:
        v = model.get(k)
        if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            fail(f"model.{k} = {v!r} is not a positive finite number")
    if sorted(model.get("overhead_s", {})) != sorted(ALGOS):
        fail(f"model.overhead_s keys {sorted(model.get('overhead_s', {}))}")
    measured = doc.get("measured", {})
    if measured.get("ranks") != 2 or measured.get("intra_pair") != [0, 1]:
        fail(f"measured: {measured}")
    if not doc.get("knobs", {}).get("auto_algorithms"):
        fail("knobs.auto_algorithms missing")

    # 2. Predict only, no mpirun, up to 4096 nodes of 4 ranks.
    proc = run([a.hpctrain, "tune-collectives", "--predict-only", "--input", out, "--predict-ranks-per-node", "4",
                "--predict-nodes-max", "4096"])
    rows = check_table(proc.stdout, 4, 4096)
    # The ring row at 1 MiB on 4 nodes (16 ranks): inter-node α/β, chunk n/16 in one 1 MiB segment;
    # the byte terms times the ring's measured calibration at 1 MiB (lg-linear between the sizes),
    # plus the ring's measured per-call overhead.
    n, p = 1 << 20, 16
    cal = model.get("calibration", {})
    sizes, scales = cal.get("bytes", []), cal.get("scale", {}).get("ring", [])
    if not sizes or len(scales) != len(sizes) or not all(x > 0 for x in scales):
        fail(f"model.calibration has no ring scales: {cal}")
    if n <= sizes[0]:
        scale = scales[0]
    elif n >= sizes[-1]:
        scale = scales[-1]
    else:
        i = next(i for i in range(1, len(sizes)) if sizes[i] >= n)
        f = math.log2(n / sizes[i - 1]) / math.log2(sizes[i] / sizes[i - 1])
        scale = scales[i - 1] + f * (scales[i] - scales[i - 1])
    ring = (2 * (p - 1) * model["alpha_inter_s"] + scale * (2 * (p - 1) / p * n * model["beta_inter_s_per_byte"]
            + (p - 1) / p * n * model["gamma_s_per_byte"]) + model["overhead_s"]["ring"]) * 1e6
    row = next(r for r in rows if r[0] == "1 MiB" and r[1] == 4)
    if abs(row[3]["ring"] - ring) > 0.051 + 1e-6 * ring:
        fail(f"ring at 1 MiB on 4x4: printed {row[3]['ring']} us, formula {ring:.3f} us")

    # 3. Bad input.
    bad = os.path.join(a.workdir, "bad-tuning.json")
    with open(bad, "w") as f:
        f.write('{"schema_version": 1, "model": {"alpha_intra_s": -1}}')
    proc = run([a.hpctrain, "tune-collectives", "--predict-only", "--input", bad, "--predict-ranks-per-node", "4"],
               expect_ok=False)
    if bad not in proc.stderr or "model.alpha_intra_s" not in proc.stderr:
        fail("the malformed file's error does not name the file and the key", proc)
    proc = run([a.hpctrain, "tune-collectives", "--predict-only", "--input", out], expect_ok=False)
    if "--predict-ranks-per-node" not in proc.stderr:
        fail("--predict-only without --predict-ranks-per-node: no clear error", proc)
    proc = run([a.hpctrain, "tune-collectives", "--output", os.path.join(a.workdir, "one.json")], expect_ok=False)
    if "2 or more ranks" not in proc.stderr:
        fail("tune-collectives on one rank: no clear error", proc)
    print("check_tune_collectives: OK")


if __name__ == "__main__":
    main()
