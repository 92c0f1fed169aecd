#!/usr/bin/python3
"""Checks hpctrain's IDX import and reader against an independent decode (gzip + numpy) and an
independent HDF5 reader (h5py), and the epoch permutation against its Python transcription.

usage: check_import_h5py.py <io_test_tool> <fashion-mnist dir>
"""
import gzip
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import h5py
import numpy as np

failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL:", msg, file=sys.stderr)


def decode_idx(path):
    """IDX per http://yann.lecun.com/exdb/mnist/: 0, 0, type, ndims, big-endian dims, data."""
    with gzip.open(path, "rb") as f:
        raw = f.read()
    zero, dtype, ndims = struct.unpack(">HBB", raw[:4])
    assert zero == 0 and dtype == 0x08, path
    dims = struct.unpack(">" + "I" * ndims, raw[4:4 + 4 * ndims])
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndims)
    assert data.size == int(np.prod(dims)), path
    return data.reshape(dims)


M = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


def mix(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
    return z ^ (z >> 31)


def epoch_permutation(n, seed, epoch):
    """docs/data.md, 'Shuffling', transcribed."""
    state = mix(seed) ^ mix((epoch + GOLDEN) & M)
    perm = list(range(n))
    for i in range(n - 1, 0, -1):
        bound = i + 1
        threshold = ((1 << 64) - bound) % bound
        while True:
            state = (state + GOLDEN) & M
            r = mix(state)
            if r >= threshold:
                break
        j = r % bound
        perm[i], perm[j] = perm[j], perm[i]
    return perm


def run(tool, *args):
    out = subprocess.run([tool, *map(str, args)], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{tool} {' '.join(map(str, args))} failed: {out.stderr}")
    return out.stdout


def main():
    tool, fm_dir = sys.argv[1], sys.argv[2]
    images = os.path.join(fm_dir, "t10k-images-idx3-ubyte.gz")
    labels = os.path.join(fm_dir, "t10k-labels-idx1-ubyte.gz")
    ref_x = decode_idx(images)
    ref_y = decode_idx(labels)
    check(ref_x.shape == (10000, 28, 28) and ref_y.shape == (10000,), "reference decode shape")

    work = tempfile.mkdtemp(prefix="hpctrain-h5py-")
    try:
        # ---- uint8, all samples ----
        out = os.path.join(work, "fm.h5")
        run(tool, "import", images, labels, out)
        with h5py.File(out, "r") as f:
            s, l = f["samples"], f["labels"]
            check(s.shape == (10000, 1, 28, 28), f"/samples shape {s.shape}")
            check(s.dtype == np.uint8, f"/samples dtype {s.dtype}")
            check(s.chunks is not None, "/samples is chunked")
            check(l.shape == (10000,) and l.dtype == np.int32, f"/labels {l.shape} {l.dtype}")
            check(np.array_equal(s[:, 0], ref_x), "/samples values equal the IDX pixels")
            check(np.array_equal(l[:], ref_y.astype(np.int32)), "/labels equal the IDX labels")
            check(abs(float(s.attrs["scale"]) - 1 / 255) < 1e-15, "samples scale 1/255")
            a = f.attrs
            check(int(a["count"]) == 10000, "count attribute")
            check(int(a["classes"]) == 10, "classes attribute")
            check(list(a["shape"]) == [1, 28, 28], f"shape attribute {a['shape']}")
            check(int(a["format_version"]) == 1, "format_version attribute")
            check(a["format"] == "hpctrain-dataset", f"format attribute {a['format']!r}")
            check("t10k-images-idx3-ubyte.gz" in a["source"] and
                  "t10k-labels-idx1-ubyte.gz" in a["source"], f"source {a['source']!r}")
            names = [n.decode() if isinstance(n, bytes) else n for n in a["class_names"]]
            check(len(names) == 10 and names[0] == "T-shirt/top" and names[9] == "Ankle boot",
                  f"class_names {names}")
        check(os.listdir(work) == ["fm.h5"], f"temporary files left: {os.listdir(work)}")

        # ---- the reader's values (C++) against numpy ----
        idx = [0, 9999, 1234, 5, 1234]
        lines = run(tool, "read", out, *idx).strip().split("\n")
        check(len(lines) == len(idx), "read output lines")
        for i, line in zip(idx, lines):
            vals = line.split()
            check(int(vals[0]) == ref_y[i], f"reader label of {i}")
            got = np.array([float(v) for v in vals[1:]], dtype=np.float64)
            want = ref_x[i].reshape(-1).astype(np.float64) / 255.0
            check(got.shape == want.shape and np.max(np.abs(got - want)) < 1e-6,
                  f"reader values of sample {i}")

        # ---- float32, first 500 ----
        out32 = os.path.join(work, "fm32.h5")
        run(tool, "import", images, labels, out32, "float32", 500)
        with h5py.File(out32, "r") as f:
            s = f["samples"]
            check(s.shape == (500, 1, 28, 28) and s.dtype == np.float32, f"float32 {s.shape}")
            check(np.allclose(s[:, 0], ref_x[:500] / np.float32(255), atol=1e-7, rtol=0),
                  "float32 values are pixels / 255")
            check(float(s.attrs["scale"]) == 1.0, "float32 scale 1")
            check(int(f.attrs["count"]) == 500, "float32 count")
            check(np.array_equal(f["labels"][:], ref_y[:500]), "float32 labels")

        # ---- the epoch permutation is the documented algorithm ----
        for n, seed, epoch in [(1000, 7, 2), (1, 0, 0), (37, 2**64 - 1, 5)]:
            got = [int(v) for v in run(tool, "permutation", n, seed, epoch).split()]
            check(got == epoch_permutation(n, seed, epoch), f"permutation N={n} seed={seed}")
    finally:
        shutil.rmtree(work, ignore_errors=True)

    if failures:
        print(f"{len(failures)} check(s) failed", file=sys.stderr)
        return 1
    print("all h5py/numpy checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
