"""PyTorch peer of bench_predict: torch.no_grad() inference samples/s of the same models.

The models are torch_ddp.py's (the same layers as hpctrain's mlp and cnn registry models), in
eval mode; `samples` random inputs in [0, 1] are normalised as the trainer does
((u - mean) / std), then run in batches of `batch` with softmax and argmax, as
`hpctrain predict` does. One process with `threads` intra-op threads. Prints one JSON line
per model: {"model", "threads", "batch", "samples", "samples_per_s" (median), "samples_per_s_best"}.

    python torch_predict.py [--models mlp,cnn] [--threads 2] [--samples 10000] [--batch 256] [--iters 5]
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_ddp import MEAN, STD, build_model  # noqa: E402  (same models as the training peer)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="mlp,cnn")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--samples", type=int, default=10000)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--iters", type=int, default=5)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1234)
    u = torch.rand(a.samples, 1, 28, 28)
    for name in a.models.split(","):
        model = build_model(name).eval()
        rates = []
        with torch.no_grad():
            for it in range(a.iters + 1):  # the first pass warms up (allocations, oneDNN primitives)
                t0 = time.perf_counter()
                for first in range(0, a.samples, a.batch):
                    x = (u[first:first + a.batch] - MEAN) / STD
                    p = torch.softmax(model(x), dim=1)
                    p.argmax(dim=1)
                if it > 0:
                    rates.append(a.samples / (time.perf_counter() - t0))
        print(json.dumps({"model": name, "threads": a.threads, "batch": a.batch, "samples": a.samples,
                          "torch": torch.__version__, "samples_per_s": statistics.median(rates),
                          "samples_per_s_best": max(rates)}), flush=True)


if __name__ == "__main__":
    main()
