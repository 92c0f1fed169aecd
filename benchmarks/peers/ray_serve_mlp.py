"""Ray Serve peer of `hpctrain serve` (scripts/compare-ray-serve.sh): the MLP 784-512-256-10 in
PyTorch (torch_ddp.py's model, eval mode, torch.no_grad()), 2 replicas of 1 CPU and 1 thread
each, @serve.batch(max_batch_size=64, batch_wait_timeout_s=0.002), at POST /v1/predict with
hpctrain's JSON: {"instances": [[...784 floats...], ...]} -> {"predictions", "probabilities"}.
Inputs are normalised as the trainer does. Runs until SIGTERM/SIGINT.

    python ray_serve_mlp.py [--port 8000] [--replicas 2] [--max-batch 64] [--wait-s 0.002]
"""
import argparse
import os
import signal
import sys
import time

import ray
import torch
from ray import serve
from starlette.requests import Request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_ddp import MEAN, STD, build_model  # noqa: E402

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("--port", type=int, default=8000)
ap.add_argument("--replicas", type=int, default=2)
ap.add_argument("--max-batch", type=int, default=64)
ap.add_argument("--wait-s", type=float, default=0.002)
a = ap.parse_args()


@serve.deployment(num_replicas=a.replicas, ray_actor_options={"num_cpus": 1})
class MLP:
    def __init__(self):
        torch.set_num_threads(1)
        self.model = build_model("mlp").eval()

    @serve.batch(max_batch_size=a.max_batch, batch_wait_timeout_s=a.wait_s)
    async def predict(self, requests):
        rows = [len(r) for r in requests]
        x = (torch.tensor([i for r in requests for i in r], dtype=torch.float32) - MEAN) / STD
        with torch.no_grad():
            p = torch.softmax(self.model(x), dim=1)
        y = p.argmax(dim=1)
        out, first = [], 0
        for n in rows:
            out.append({"predictions": y[first:first + n].tolist(), "probabilities": p[first:first + n].tolist()})
            first += n
        return out

    async def __call__(self, request: Request):
        body = await request.json()
        return await self.predict(body["instances"])


serve.start(http_options={"host": "127.0.0.1", "port": a.port})
serve.run(MLP.bind(), route_prefix="/v1/predict")
print(f"ray serve: ready on http://127.0.0.1:{a.port}/v1/predict", flush=True)
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
signal.signal(signal.SIGINT, lambda *_: stop.append(1))
while not stop:
    time.sleep(0.2)
ray.shutdown()  # serve.shutdown() can wait a long time for its graceful drain; the load is over
