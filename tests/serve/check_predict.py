"""`hpctrain predict` end to end (docs/serving.md): a short MLP training at np 2 with a
non-default normalisation leaves a checkpoint; predict at np 1, 2, 3 must
  - write files h5py reads, whose /predictions and /probabilities bytes are identical at every P,
  - reach exactly the trainer's own test accuracy (the JSONL summary's eval_accuracy),
  - agree with a float64 NumPy forward pass of the exported parameters (normalisation applied),
  - record the provenance attributes;
an old checkpoint without the recorded normalisation uses the trainer's defaults; a damaged
checkpoint and bad flags are refused with one clear message, every rank exiting non-zero."""
import argparse
import json
import os
import shutil

import h5py
import numpy as np

from serve_test_support import Runner, fail, mlp_reference, read_samples

ap = argparse.ArgumentParser()
ap.add_argument("--hpctrain", required=True)
ap.add_argument("--mpiexec", required=True)
ap.add_argument("--mpiexec-flag", action="append", default=[])
ap.add_argument("--workdir", required=True)
a = ap.parse_args()
shutil.rmtree(a.workdir, ignore_errors=True)
r = Runner(a.hpctrain, a.mpiexec, a.workdir, a.mpiexec_flag)

train_h5, test_h5 = r.import_subset("train", 2048), r.import_subset("test", 1000)
MEAN, STD = 0.25, 0.4
ckpt, summary = r.train("mlp", train_h5, test_h5, "--normalize-mean", str(MEAN), "--normalize-std", str(STD))
u, labels = read_samples(test_h5)
step_dir = os.path.join(ckpt, open(os.path.join(ckpt, "latest")).read().strip())
manifest = json.load(open(os.path.join(step_dir, "manifest.json")))
if manifest["metadata"].get("input_normalization") != {"mean": np.float32(MEAN).item(), "std": np.float32(STD).item()}:
    fail(f"the checkpoint does not record the normalisation: {manifest['metadata'].get('input_normalization')}")

# --- predict at np 1..3: same bytes, the trainer's accuracy, the NumPy reference ------------------
reference = mlp_reference(r, step_dir, u, np.float32(MEAN), np.float32(STD))
outputs = {}
for np_ in (1, 2, 3):
    out = r.path(f"pred-np{np_}.h5")
    log = r.must(np_, "predict", "--checkpoint", ckpt, "--data", test_h5, "--out", out, "--batch", "100")
    if log.count("hpctrain: wrote " + out) != 1:
        fail(f"np {np_}: expected the 'wrote' line once:\n{log}")
    with h5py.File(out, "r") as f:
        pred, prob = f["predictions"][...], f["probabilities"][...]
        if pred.dtype != np.int32 or pred.shape != (1000,) or prob.dtype != np.float32 or prob.shape != (1000, 10):
            fail(f"np {np_}: wrong types/shapes {pred.dtype}{pred.shape} {prob.dtype}{prob.shape}")
        attrs = dict(f.attrs)
    for key, want in (("checkpoint_step", manifest["step"]), ("batch", 100), ("format", "hpctrain-predictions"),
                      ("checkpoint_checksum", "xxh3:%016x" % manifest["metadata"]["parameter_checksum"])):
        got = attrs.get(key)
        got = got.decode() if isinstance(got, bytes) else got
        if got != want:
            fail(f"np {np_}: attribute {key} = {got!r}, expected {want!r}")
    if json.loads(attrs["model"]) != manifest["metadata"]["model"]:
        fail(f"np {np_}: model attribute {attrs['model']!r}")
    if abs(attrs["normalize_mean"] - MEAN) > 1e-6 or abs(attrs["normalize_std"] - STD) > 1e-6:
        fail(f"np {np_}: normalisation attributes {attrs['normalize_mean']} {attrs['normalize_std']}")
    outputs[np_] = (pred.tobytes(), prob.tobytes())
    correct = int((pred == labels).sum())
    want_correct = round(summary["eval_accuracy"] * len(labels))
    if correct != want_correct:
        fail(f"np {np_}: {correct} correct, the trainer's evaluation had {want_correct}")
    err = np.abs(prob.astype(np.float64) - reference).max()
    if err > 1e-4:
        fail(f"np {np_}: probabilities differ from the float64 reference by {err}")
    if not np.array_equal(pred, reference.argmax(axis=1)):
        fail(f"np {np_}: predictions differ from the float64 reference's argmax")
    print(f"np {np_}: {correct}/1000 correct as the trainer's evaluation; max |p - p64| = {err:.2e}")
for np_ in (2, 3):
    if outputs[np_] != outputs[1]:
        fail(f"np {np_}: /predictions or /probabilities bytes differ from np 1")
print("bytes of /predictions and /probabilities identical at np 1, 2, 3")

# --- an old checkpoint (no recorded normalisation): the trainer's defaults -----------------------
old = r.path("old-ckpt/step-old")
shutil.copytree(step_dir, old)
m = json.load(open(os.path.join(old, "manifest.json")))
del m["metadata"]["input_normalization"]
m["format_version"] = 1
del m["manifest_xxh3"]
json.dump(m, open(os.path.join(old, "manifest.json"), "w"), indent=1)
r.must(2, "predict", "--checkpoint", old, "--data", test_h5, "--out", r.path("pred-old.h5"))
with h5py.File(r.path("pred-old.h5"), "r") as f:
    prob_old = f["probabilities"][...]
    if abs(f.attrs["normalize_mean"] - 0.2860) > 1e-6 or abs(f.attrs["normalize_std"] - 0.3530) > 1e-6:
        fail("an old checkpoint did not get the trainer's default normalisation")
err = np.abs(prob_old - mlp_reference(r, old, u, np.float32(0.2860), np.float32(0.3530))).max()
if err > 1e-4:
    fail(f"old checkpoint: probabilities differ from the reference with the defaults by {err}")
print("a checkpoint without input_normalization uses the trainer's defaults")


# --- the model zoo: batch norm in evaluation mode (running statistics) and attention ------------
for model in ("resnet", "transformer"):
    zoo_ckpt, zoo_summary = r.train(model, train_h5, test_h5, "--model", model, "--max-steps", "12")
    got = {}
    for np_ in (1, 3):
        out = r.path(f"pred-{model}-np{np_}.h5")
        r.must(np_, "predict", "--checkpoint", zoo_ckpt, "--data", test_h5, "--out", out, "--batch", "64")
        with h5py.File(out, "r") as f:
            got[np_] = (f["predictions"][...], f["probabilities"][...].tobytes())
    correct = int((got[1][0] == labels).sum())
    want_correct = round(zoo_summary["eval_accuracy"] * len(labels))
    if correct != want_correct:
        fail(f"{model}: predict has {correct} correct, the trainer's evaluation had {want_correct}")
    if got[3][1] != got[1][1] or not np.array_equal(got[3][0], got[1][0]):
        fail(f"{model}: /predictions or /probabilities bytes differ between np 1 and np 3")
    print(f"{model}: {correct}/1000 correct as the trainer's evaluation; bytes identical at np 1 and 3")


# --- refusals: one message, every rank non-zero, no output file ----------------------------------
def refused(np_, args, expect, code=None):
    out_file = r.path("refused.h5")
    if os.path.exists(out_file):
        os.remove(out_file)
    rc, log = r.run(np_, "predict", *args, timeout=120)
    if rc == 0 or (code is not None and rc != code):
        fail(f"predict {' '.join(args)} exited {rc} (expected {code or 'non-zero'}):\n{log}")
    if log.count(expect) != 1:
        fail(f"predict {' '.join(args)}: expected {expect!r} once in:\n{log}")
    if os.path.exists(out_file) or any(n.startswith(".refused.h5.tmp") for n in os.listdir(a.workdir)):
        fail(f"predict {' '.join(args)}: left an output or temporary file")
    print(f"refused as expected at np {np_}: {expect}")


damaged = r.path("damaged-ckpt")
shutil.copytree(ckpt, damaged)
damaged_step = os.path.join(damaged, os.path.basename(step_dir))
shard = os.path.join(damaged_step, sorted(n for n in os.listdir(damaged_step) if n.startswith("shard-"))[0])
with h5py.File(shard, "r") as f:
    names = []
    f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) and o.size > 1000 else None)
    where = f[names[0]].id.get_offset() + 4000
with open(shard, "r+b") as f:
    f.seek(where)
    b = f.read(1)
    f.seek(where)
    f.write(bytes([b[0] ^ 0x08]))
common = ["--data", test_h5, "--out", r.path("refused.h5")]
refused(2, ["--checkpoint", damaged_step, *common], f"{shard}: checksum")
refused(3, ["--checkpoint", damaged, *common], "holds no valid checkpoint")
refused(2, ["--checkpoint", r.path("nowhere"), *common], "is not a directory")
refused(2, ["--checkpoint", ckpt, "--data", r.path("missing.h5"), "--out", r.path("refused.h5")], "missing.h5")
refused(2, ["--checkpoint", ckpt, *common, "--batch", "0"], "--batch", code=2)
refused(3, ["--checkpoint", ckpt, "--data", test_h5, "--out", r.path("no-dir/refused.h5")], "does not exist")
refused(2, ["--checkpoint", ckpt, *common, "--bogus"], "--bogus", code=2)
print("OK")
