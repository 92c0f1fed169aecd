#!/usr/bin/python3
"""Smoke check of bench_allreduce: runs the command after `--`, requires exit 0 and Google
Benchmark JSON (stdout, or the file named by --benchmark_out=) holding every algorithm at every
size, with "wrong" == 0, no errored run, and sane counters. With --table, also requires rank 0's
nccl-tests-style table on stdout/stderr.

  check_bench_json.py --algorithms ring,tree,auto,mpi --sizes 8,64 --ranks 2 [--table] -- CMD...
"""
import argparse
import json
import re
import subprocess
import sys


def fail(msg, out="", err=""):
    sys.stderr.write(f"check_bench_json: FAIL: {msg}\n")
    if out:
        sys.stderr.write("---- stdout ----\n" + out[-4000:] + "\n")
    if err:
        sys.stderr.write("---- stderr ----\n" + err[-4000:] + "\n")
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--algorithms", required=True)
    ap.add_argument("--sizes", required=True)
    ap.add_argument("--ranks", type=int, required=True)
    ap.add_argument("--table", action="store_true")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    out, err = proc.stdout, proc.stderr
    if proc.returncode != 0:
        fail(f"exit code {proc.returncode}", out, err)

    out_file = next((c.split("=", 1)[1] for c in cmd if c.startswith("--benchmark_out=")), None)
    try:
        if out_file:
            with open(out_file) as f:
                doc = json.load(f)
        else:
            doc = json.loads(out)
    except (OSError, ValueError) as e:
        fail(f"no JSON output ({e})", out, err)

    runs = doc.get("benchmarks", [])
    seen = {}
    for r in runs:
        m = re.match(r"allreduce/([a-z_]+)/(\d+)(/|$)", r.get("run_name", r["name"]))
        if not m:
            fail(f"unexpected benchmark name {r['name']!r}")
        algo, size = m.group(1), int(m.group(2))
        if r.get("error_occurred"):
            fail(f"{r['name']}: {r.get('error_message')}", out, err)
        if r.get("wrong") != 0:
            fail(f"{r['name']}: wrong = {r.get('wrong')}", out, err)
        if r.get("ranks") != a.ranks or r.get("bytes") != size or r.get("label") != algo:
            fail(f"{r['name']}: ranks/bytes/label counters {r.get('ranks')}/{r.get('bytes')}/"
                 f"{r.get('label')} do not match")
        if not (r.get("real_time", 0) > 0 and r.get("algbw", 0) > 0):
            fail(f"{r['name']}: non-positive time or algbw")
        busbw = r["algbw"] * 2 * (a.ranks - 1) / a.ranks
        if abs(r.get("busbw", -1) - busbw) > 1e-9 * max(1.0, busbw):
            fail(f"{r['name']}: busbw {r.get('busbw')} != algbw*2(p-1)/p = {busbw}")
        bound = r.get("bound_GBps", -1)
        copy = r.get("copy_GBps", -1)
        if not (copy > 0 and abs(bound - copy * 2 * (a.ranks - 1) / a.ranks) <= 1e-9 * max(1.0, bound)):
            fail(f"{r['name']}: bound_GBps {bound} is not copy_GBps {copy} * 2(p-1)/p")
        ratio = r["busbw"] / bound if bound > 0 else 0.0
        if abs(r.get("busbw_over_bound", -1) - ratio) > 1e-9 * max(1.0, ratio):
            fail(f"{r['name']}: busbw_over_bound {r.get('busbw_over_bound')} != busbw/bound = {ratio}")
        seen[(algo, size)] = r
    for algo in a.algorithms.split(","):
        for size in map(int, a.sizes.split(",")):
            if (algo, size) not in seen:
                fail(f"no result for allreduce/{algo}/{size}", out, err)
    if len(seen) != len(a.algorithms.split(",")) * len(a.sizes.split(",")):
        fail(f"expected exactly the requested runs, got {sorted(seen)}")

    if a.table:
        text = out + err
        if not re.search(r"size\(B\).*time\(us\).*algbw.*busbw.*#wrong", text):
            fail("rank 0's table is missing", out, err)
        if text.count("# Out of bounds values") != 1:
            fail("table printed more than once (only rank 0 may print)", out, err)
        if "Out of bounds values : 0 OK" not in text:
            fail("table does not report 0 wrong values", out, err)
    print(f"check_bench_json: OK ({len(seen)} runs, {a.ranks} ranks)")


if __name__ == "__main__":
    main()
