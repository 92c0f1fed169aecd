#!/usr/bin/env python3
"""A checkpoint written by 3 ranks (checkpoint_formula_writer), checked with h5py and numpy
only: every shard's pieces hold the formula's values at the manifest's offsets, with the
`offset`/`global_shape` attributes; the pieces tile every tensor; shard sizes match the
manifest; `hpctrain ckpt inspect` verifies it; `hpctrain ckpt export` writes the parameters
with their global shapes and the formula's values; h5ls and h5dump list the tensors."""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import h5py
import numpy as np

SPEC = [("params/0.dense.weight", (5, 7)), ("params/0.dense.bias", (2,)), ("params/1.empty", (0, 3)),
        ("params/2.conv.weight", (4, 1, 3, 3)), ("params/2.conv.bias", (1,)),
        ("optimizer/momentum/0.dense.weight", (5, 7))]
P = 3
STEP = 5


def formula(t, shape):
    n = int(np.prod(shape))
    return (np.arange(n, dtype=np.float64) + t * 1000 + 0.25).astype(np.float32)


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=100)
    print("$", " ".join(cmd), "->", r.returncode)
    print(r.stdout[-3000:], r.stderr[-3000:])
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mpiexec", required=True)
    ap.add_argument("--writer", required=True)
    ap.add_argument("--hpctrain", required=True)
    a = ap.parse_args()
    failures = []

    def check(cond, what):
        if not cond:
            failures.append(what)
            print("FAIL:", what)

    work = tempfile.mkdtemp(prefix="hpctrain-ckpt-h5py-")
    try:
        ckpt = os.path.join(work, "ckpt")
        r = run([a.mpiexec, "-n", str(P), "--oversubscribe", a.writer, ckpt, str(STEP)])
        if r.returncode != 0:
            print("writer failed")
            return 1
        step = os.path.join(ckpt, "step-%d" % STEP)
        with open(os.path.join(step, "manifest.json")) as f:
            m = json.load(f)
        check(m["world_size"] == P and len(m["shards"]) == P, "world size / shard list")
        check(m["step"] == STEP, "step")
        check(m["metadata"] == {"written_by": "formula"}, "metadata kept as given")
        check(open(os.path.join(ckpt, "latest")).read().strip() == "step-%d" % STEP, "latest")
        for s in m["shards"]:
            path = os.path.join(step, s["file"])
            check(os.path.getsize(path) == s["bytes"], "size of " + s["file"])
        names = [t["name"] for t in m["tensors"]]
        check(names == [n for n, _ in SPEC], "tensor names in order: %s" % names)
        per_shard = [0] * P
        for t, (name, shape) in enumerate(SPEC):
            entry = m["tensors"][t]
            check(tuple(entry["shape"]) == shape and entry["dtype"] == "f32", name + " shape/dtype")
            expect = formula(t, shape)
            got = np.full(expect.shape, np.nan, dtype=np.float32)
            covered = np.zeros(expect.shape, dtype=np.int32)
            for p in entry["pieces"]:
                with h5py.File(os.path.join(step, m["shards"][p["shard"]]["file"]), "r") as f:
                    ds = f["/" + name]
                    check(ds.dtype == np.dtype("<f4"), name + " stored as little-endian float32")
                    check(ds.shape == (p["count"],), name + " piece length")
                    check(int(ds.attrs["offset"]) == p["offset"], name + " offset attribute")
                    check(tuple(int(x) for x in np.atleast_1d(ds.attrs["global_shape"])) == shape,
                          name + " global_shape attribute")
                    got[p["offset"]:p["offset"] + p["count"]] = ds[...]
                    covered[p["offset"]:p["offset"] + p["count"]] += 1
                    per_shard[p["shard"]] += p["count"]
            check(bool(np.all(covered == 1)), name + ": pieces tile the tensor exactly once")
            check(np.array_equal(got.view(np.uint32), expect.view(np.uint32)), name + ": values (bitwise)")
        total = sum(int(np.prod(s)) for _, s in SPEC)
        check(max(per_shard) - min(per_shard) <= 1, "work split evenly over shards: %s of %d" % (per_shard, total))

        # Standard tools list every tensor slice under its name.
        for s in m["shards"]:
            r = run(["h5ls", "-r", os.path.join(step, s["file"])])
            check(r.returncode == 0, "h5ls " + s["file"])
        r = run(["h5dump", "-H", os.path.join(step, m["shards"][0]["file"])])
        check(r.returncode == 0 and 'DATASET "0.dense.weight"' in r.stdout, "h5dump -H shows params/0.dense.weight")

        # inspect verifies, export consolidates the parameters.
        r = run([a.mpiexec, "-n", "1", a.hpctrain, "ckpt", "inspect", ckpt])
        check(r.returncode == 0 and "all shard sizes and checksums verify" in r.stdout, "ckpt inspect")
        out = os.path.join(work, "model.h5")
        r = run([a.mpiexec, "-n", "1", a.hpctrain, "ckpt", "export", step, out])
        check(r.returncode == 0, "ckpt export exit status")
        with h5py.File(out, "r") as f:
            exported = []
            f.visititems(lambda n, o: exported.append(n) if isinstance(o, h5py.Dataset) else None)
            want = sorted(n[len("params/"):] for n, _ in SPEC if n.startswith("params/"))
            check(sorted(exported) == want, "export holds exactly the parameters: %s" % sorted(exported))
            for t, (name, shape) in enumerate(SPEC):
                if not name.startswith("params/"):
                    continue
                ds = f["/" + name[len("params/"):]]
                check(ds.shape == shape, name + " exported with its global shape %s" % (ds.shape,))
                check(np.array_equal(ds[...].reshape(-1).view(np.uint32), formula(t, shape).view(np.uint32)),
                      name + " exported values")
            check(int(f.attrs["step"]) == STEP, "export step attribute")

        # A bit flipped in a shard's data is caught by inspect (and named).
        with h5py.File(os.path.join(step, m["shards"][1]["file"]), "r") as f:
            name = next(t["name"] for t in m["tensors"] if any(p["shard"] == 1 and p["count"] > 0 for p in t["pieces"]))
            offset = f["/" + name].id.get_offset()
        path = os.path.join(step, m["shards"][1]["file"])
        with open(path, "r+b") as f:
            f.seek(offset)
            b = f.read(1)
            f.seek(offset)
            f.write(bytes([b[0] ^ 0x10]))
        r = run([a.mpiexec, "-n", "1", a.hpctrain, "ckpt", "inspect", step])
        check(r.returncode != 0 and m["shards"][1]["file"] in r.stdout and "checksum mismatch" in r.stdout,
              "inspect names the bit-flipped shard")
        r = run([a.mpiexec, "-n", "1", a.hpctrain, "ckpt", "export", step, out + ".2"])
        check(r.returncode != 0 and "checksum mismatch" in r.stdout + r.stderr and not os.path.exists(out + ".2"),
              "export refuses a damaged checkpoint")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if failures:
        print("%d check(s) failed" % len(failures))
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
