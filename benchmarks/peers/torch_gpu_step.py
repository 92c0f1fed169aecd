#!/usr/bin/env python3
"""PyTorch CUDA peer of gpu_check's training steps (scripts/gpu-check.sh, issue 23).

Times the same training step gpu_check times: hpctrain's built-in `mlp` and `cnn` (the layer
shapes of torch_ddp.build_model), batch 128, mean cross-entropy, SGD lr 0.05 momentum 0.9, on
synthetic data (inputs uniform in [-1, 1], labels the argmax of a fixed random linear teacher,
8 batches made once on the GPU and cycled), warm-up steps, then timed steps between
torch.cuda.synchronize() calls. float32 throughout with TF32 off for matmuls and cuDNN
convolutions, as hpctrain's cuBLAS sgemm computes (PyTorch turns TF32 on for cuDNN by default;
--tf32 measures that too, as a second record).

    python3 benchmarks/peers/torch_gpu_step.py --json OUT.json [--steps 30] [--warmup 5] [--cpu]

Writes a JSON array of records {"name": "torch.train.<model>", "passed", "figures", "units",
"detail"}, the format of gpu_check's, and prints each. --cpu runs on the CPU (the rehearsal
where no GPU is present). Exit 0 when every record passed, 1 otherwise, 2 on bad arguments or
when CUDA is asked for and absent.
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_ddp import build_model  # noqa: E402  (the peer's one definition of the models)


def synthetic(device, batch, batches, features=784, classes=10):
    g = torch.Generator().manual_seed(7)
    teacher = torch.rand(classes, features, generator=g) * 2 - 1
    data = []
    for _ in range(batches):
        x = torch.rand(batch, features, generator=g) * 2 - 1
        y = (x @ teacher.t()).argmax(dim=1)
        data.append((x.view(batch, 1, 28, 28).to(device), y.to(device)))
    return data


def time_model(name, device, steps, warmup, tf32):
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.manual_seed(1)
    model = build_model(name).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    data = synthetic(device, 128, 8)
    losses = []

    def step(i):
        x, y = data[i % 8]
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for i in range(warmup):
        losses.append(step(i).detach())
    sync()
    t0 = time.perf_counter()
    for i in range(warmup, warmup + steps):
        losses.append(step(i).detach())
    sync()
    t = time.perf_counter() - t0
    losses = [l.item() for l in losses]
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    ok = all(l == l for l in losses) and last < first
    suffix = ".tf32" if tf32 else ""
    return {
        "name": f"torch.train.{name}{suffix}",
        "passed": ok,
        "figures": {"samples_per_s": 128 * steps / t, "step_ms": 1e3 * t / steps,
                    "loss_first5": first, "loss_last5": last},
        "units": {"samples_per_s": "samples/s", "step_ms": "ms", "loss_first5": "nats", "loss_last5": "nats"},
        "detail": (f"PyTorch {torch.__version__} on {device}"
                   + (f" ({torch.cuda.get_device_name()})" if device.type == "cuda" else "")
                   + f", {name} as torch_ddp.build_model, batch 128, SGD lr 0.05 momentum 0.9, "
                   f"{warmup} warm-up + {steps} timed steps, TF32 {'on' if tf32 else 'off'}"),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", required=True, help="where the records go (a JSON array)")
    ap.add_argument("--steps", type=int, default=30, help="timed steps per model (default 30)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps first (default 5)")
    ap.add_argument("--cpu", action="store_true", help="run on the CPU (rehearsal without a GPU)")
    ap.add_argument("--tf32", action="store_true", help="also time each model with TF32 on")
    a = ap.parse_args()
    if a.steps < 5 or a.warmup < 1:
        ap.error("--steps must be at least 5 and --warmup at least 1")
    if not a.cpu and not torch.cuda.is_available():
        print("torch_gpu_step: torch.cuda.is_available() is False: no GPU for PyTorch here "
              "(--cpu runs the rehearsal on the CPU)", file=sys.stderr)
        return 2
    device = torch.device("cpu" if a.cpu else "cuda")
    records = []
    for name in ("mlp", "cnn"):
        for tf32 in ((False, True) if a.tf32 else (False,)):
            r = time_model(name, device, a.steps, a.warmup, tf32)
            print("torch_gpu_step: " + json.dumps(r), flush=True)
            records.append(r)
    with open(a.json, "w") as f:
        json.dump(records, f, indent=2)
    return 0 if all(r["passed"] for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
