"""Ray Tune peer of `hpctrain sweep` (scripts/compare-ray-tune.sh, docs/sweeps.md).

The same search (SPACE.json's `search` with its distributions; `base` epochs and global batch
as defaults), the same ASHA settings (Ray's ASHAScheduler: grace period, reduction factor,
max_t = epochs, one bracket, as hpctrain's), the same trial budget and the same cores (Ray
started with --cpus CPUs, one CPU and one torch thread per trial: --cpus trials at once, as
hpctrain's --ranks-per-trial 1 on as many ranks). Each trial trains hpctrain's `mlp` (the
model, initialisation, data reading and evaluation of torch_ddp.py, imported) with SGD and
reports the test accuracy after every epoch with its wall-clock time.

Prints one JSON line: wall seconds of tuner.fit() and of the whole script, every report
(trial, epochs, accuracy, seconds since fit() began), the best accuracy.
"""

import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_ddp import MEAN, STD, build_model, evaluate, load_split  # noqa: E402

import ray  # noqa: E402
from ray import tune  # noqa: E402
from ray.tune.schedulers import ASHAScheduler  # noqa: E402

START = time.time()


def search_space(spec):
    space = {}
    for key, dist in spec.items():
        (kind, args), = dist.items()
        key = key.replace("_", "-")
        if kind == "choice":
            space[key] = tune.choice(args)
        elif kind == "grid":
            space[key] = tune.grid_search(args)
        elif kind == "uniform":
            space[key] = tune.uniform(*args)
        elif kind == "loguniform":
            space[key] = tune.loguniform(*args)
        elif kind == "randint":
            space[key] = tune.randint(*args)
        else:
            raise SystemExit(f"ray_tune_asha.py: unknown distribution {kind}")
    return space


def trainable(config):
    torch.set_num_threads(int(config.get("threads", 1)))
    x, y = load_split(config["train"], MEAN, STD)
    xt, yt = load_split(config["test"], MEAN, STD)
    torch.manual_seed(config["seed"])
    model = build_model("mlp")
    opt = torch.optim.SGD(model.parameters(), lr=config["lr"], momentum=config.get("momentum", 0.9))
    batch = int(config.get("global-batch", 128))
    for epoch in range(config["epochs"]):
        order = torch.from_numpy(np.random.RandomState(config["seed"] + epoch).permutation(x.shape[0]))
        for b in range(x.shape[0] // batch):  # the last partial batch dropped, as hpctrain's
            idx = order[b * batch:(b + 1) * batch]
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(x.index_select(0, idx)), y.index_select(0, idx)).backward()
            opt.step()
        loss, acc = evaluate(model, xt, yt, 0, 1)
        tune.report({"test_accuracy": acc, "test_loss": loss, "epochs": epoch + 1, "wall": time.time()})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--space", required=True)
    ap.add_argument("--train", required=True)
    ap.add_argument("--test", required=True)
    ap.add_argument("--trials", type=int, required=True)
    ap.add_argument("--cpus", type=int, required=True)
    ap.add_argument("--cpus-per-trial", type=int, default=1,
                    help="CPUs (torch intra-op threads) each trial holds; cpus // this trials run at once")
    ap.add_argument("--grace", type=int, default=1)
    ap.add_argument("--reduction-factor", type=float, default=2)
    ap.add_argument("--storage", required=True)
    ap.add_argument("--points", help="JSON list of trial parameter dicts to evaluate, in order (hpctrain's draws); "
                                     "the space is sampled only beyond them")
    a = ap.parse_args()
    spec = json.load(open(a.space))
    base = spec.get("base", {})
    epochs = int(base.get("epochs", 1))
    space = search_space(spec["search"])
    if a.cpus_per_trial < 1 or a.cpus % a.cpus_per_trial:
        raise SystemExit(f"ray_tune_asha.py: --cpus-per-trial {a.cpus_per_trial} must divide --cpus {a.cpus}")
    concurrent = a.cpus // a.cpus_per_trial
    space.update({"train": a.train, "test": a.test, "epochs": epochs, "seed": int(spec.get("seed", 0)),
                  "threads": a.cpus_per_trial})
    if "global-batch" not in space and "global_batch" not in space:
        space["global-batch"] = int(base.get("global-batch", base.get("global_batch", 128)))
    ray.init(num_cpus=a.cpus, include_dashboard=False, log_to_driver=False, configure_logging=False)
    scheduler = ASHAScheduler(time_attr="training_iteration", metric="test_accuracy", mode="max", max_t=epochs,
                              grace_period=a.grace, reduction_factor=a.reduction_factor)
    search_alg = None
    if a.points:
        points = [{k.replace("_", "-"): v for k, v in p.items()} for p in json.load(open(a.points))]
        search_alg = tune.search.BasicVariantGenerator(points_to_evaluate=points, max_concurrent=concurrent)
    tuner = tune.Tuner(tune.with_resources(trainable, {"cpu": a.cpus_per_trial}), param_space=space,
                       tune_config=tune.TuneConfig(scheduler=scheduler, num_samples=a.trials,
                                                   search_alg=search_alg),
                       run_config=tune.RunConfig(storage_path=os.path.abspath(a.storage), verbose=0))
    fit_start = time.time()
    grid = tuner.fit()
    fit_s = time.time() - fit_start
    reports = []
    for i, r in enumerate(grid):
        df = r.metrics_dataframe
        for _, row in df.iterrows():
            reports.append({"trial": i, "epochs": int(row["epochs"]), "metric": float(row["test_accuracy"]),
                            "seconds": float(row["wall"]) - fit_start})
    best = max(rep["metric"] for rep in reports)
    print(json.dumps({"peer": f"ray {ray.__version__} + torch {torch.__version__}", "fit_seconds": fit_s,
                      "script_seconds": time.time() - START, "trials": len(grid), "best_test_accuracy": best,
                      "reports": reports}))
    ray.shutdown()


if __name__ == "__main__":
    main()
