#!/usr/bin/python3
"""PyTorch DDP peer of bench_train / `hpctrain train` (docs/benchmarks-training.md).

Trains hpctrain's built-in `mlp`, `cnn`, `resnet` or `transformer` with the same layer shapes, initialisation family
(He/Kaiming-normal weights, zero biases), data (hpctrain's HDF5 files, read with h5py and
normalised the same way), sharding (one global permutation per epoch, each rank takes its
contiguous slice of every global batch; the last partial global batch dropped), loss (mean
cross-entropy over the global batch: DDP averages the ranks' gradients of their local means)
and optimiser (SGD, momentum 0.9, lr 0.05, PyTorch semantics) as hpctrain.

One CPU thread per rank (torch.set_num_threads(1)), gloo backend, env:// rendezvous. Launch:

    mpirun -n P /usr/bin/python3 benchmarks/peers/torch_ddp.py --model cnn --epochs 1 ...
    /usr/bin/python3 -m torch.distributed.run --nproc_per_node P benchmarks/peers/torch_ddp.py ...
    /usr/bin/python3 benchmarks/peers/torch_ddp.py ...            (one rank, no launcher)

Rank and world size come from RANK/WORLD_SIZE (torch.distributed.run) or
OMPI_COMM_WORLD_RANK/SIZE (Open MPI's mpirun); MASTER_ADDR/MASTER_PORT default to
127.0.0.1:29517. Rank 0 prints one JSON line: samples/s after the warm-up steps (evaluation
excluded; time = the slowest rank's), test accuracy after the last epoch, and the time split.

The training data set is held in memory as one float32 tensor and batches are gathered with
index_select: no DataLoader, so the peer pays no per-sample Python cost (its fastest honest
form; hpctrain reads every batch from the HDF5 file on a prefetch thread instead).
"""

import argparse
import json
import os
import resource
import sys
import time

import h5py
import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

MEAN, STD = 0.2860, 0.3530  # hpctrain's defaults (Fashion-MNIST training-set statistics)


def rank_and_world():
    for r, w in (("RANK", "WORLD_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
                 ("PMI_RANK", "PMI_SIZE")):
        if r in os.environ and w in os.environ:
            return int(os.environ[r]), int(os.environ[w])
    return 0, 1


def load_split(path, mean, std):
    """(samples float32 [N, C, H, W] normalised as hpctrain's reader does, labels int64)."""
    with h5py.File(path, "r") as f:
        raw = f["samples"][...]
        scale = float(f["samples"].attrs.get("scale", 1.0))
        labels = f["labels"][...].astype(np.int64)
    # hpctrain: x = v * (scale / std) - mean / std, in float32.
    x = raw.astype(np.float32) * np.float32(scale / std) - np.float32(mean / std)
    if x.ndim == 2:  # N x F: the MLP flattens anyway
        x = x.reshape(x.shape[0], 1, 28, 28) if x.shape[1] == 784 else x
    return torch.from_numpy(np.ascontiguousarray(x)), torch.from_numpy(labels)


def build_model(name, hidden=(512, 256), channels=(32, 64), kernel=5, pool=2):
    if name == "mlp":  # 784-512-256-10 by default (--hidden), ReLU
        layers, width = [nn.Flatten()], 784
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        model = nn.Sequential(*layers, nn.Linear(width, 10))
    elif name == "cnn":  # default: conv5x5x32 pad2 -> ReLU -> pool2 -> conv5x5x64 pad2 -> ReLU -> pool2 -> 256 -> 10
        # hpctrain's registry: per channel count a conv (stride 1, same padding), ReLU, max-pool;
        # then the dense head (hidden widths, ReLU) and the 10-way output.
        layers, c, side = [], 1, 28
        for ch in channels:
            layers += [nn.Conv2d(c, ch, kernel, padding=kernel // 2), nn.ReLU(), nn.MaxPool2d(pool)]
            c, side = ch, side // pool
        layers.append(nn.Flatten())
        width = c * side * side
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        model = nn.Sequential(*layers, nn.Linear(width, 10))
    else:
        raise SystemExit(f"torch_ddp.py: unknown model '{name}' (mlp, cnn or resnet)")
    init_like_hpctrain(model)
    return model


class BasicBlock(nn.Module):
    """hpctrain's Residual block of `resnet`: [conv3x3(stride) BN ReLU conv3x3 BN] + shortcut
    (identity, or conv1x1(stride) BN where the shape changes), then ReLU (a separate layer there)."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.main = nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1), nn.BatchNorm2d(cout), nn.ReLU(),
                                  nn.Conv2d(cout, cout, 3, 1, 1), nn.BatchNorm2d(cout))
        self.shortcut = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, 0), nn.BatchNorm2d(cout))
                         if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x):
        return F.relu(self.main(x) + self.shortcut(x))


def build_resnet(channels=(16, 32, 64), blocks=1):
    """models/resnet.cpp: stem conv3x3 BN ReLU; per stage `blocks` BasicBlocks (stride 2 at the
    first block of every stage but the first); global average pooling; dense."""
    layers, c = [nn.Conv2d(1, channels[0], 3, 1, 1), nn.BatchNorm2d(channels[0]), nn.ReLU()], channels[0]
    for s, ch in enumerate(channels):
        for b in range(blocks):
            layers.append(BasicBlock(c, ch, 2 if s > 0 and b == 0 else 1))
            c = ch
    model = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, 10))
    for m in model.modules():  # hpctrain's resnet: He normal (fan in) convolutions, zero biases
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_in", nonlinearity="relu")
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear):
            nn.init.kaiming_uniform_(m.weight, a=5**0.5)
            nn.init.zeros_(m.bias)
    return model


class EncoderBlock(nn.Module):
    """hpctrain's transformer block: x + MHSA(LN(x)); x + MLP(LN(x)), GELU in its tanh form."""

    def __init__(self, dim, heads, mlp_dim):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_dim), nn.GELU(approximate="tanh"), nn.Linear(mlp_dim, dim))
        for m in self.mlp:  # hpctrain: fan-in uniform weights, zero biases
            if isinstance(m, nn.Linear):
                nn.init.kaiming_uniform_(m.weight, a=5**0.5)
                nn.init.zeros_(m.bias)

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class VisionTransformer(nn.Module):
    """models/transformer.cpp: patch embedding (a p x p conv with stride p), class token and
    learned positions (both U(+-sqrt(3/dim))), `depth` pre-norm blocks, LayerNorm, the class
    token, dense."""

    def __init__(self, patch=7, dim=64, depth=4, heads=4, mlp_dim=128, side=28, classes=10):
        super().__init__()
        tokens = (side // patch) ** 2 + 1
        self.embed = nn.Conv2d(1, dim, patch, stride=patch)
        nn.init.kaiming_uniform_(self.embed.weight, a=5**0.5)
        nn.init.zeros_(self.embed.bias)
        bound = (3.0 / dim) ** 0.5
        self.cls = nn.Parameter(torch.empty(1, 1, dim).uniform_(-bound, bound))
        self.pos = nn.Parameter(torch.empty(1, tokens, dim).uniform_(-bound, bound))
        self.blocks = nn.Sequential(*[EncoderBlock(dim, heads, mlp_dim) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)
        nn.init.kaiming_uniform_(self.head.weight, a=5**0.5)
        nn.init.zeros_(self.head.bias)

    def forward(self, x):
        t = self.embed(x).flatten(2).transpose(1, 2)  # [N, patches, dim], patches row by row
        t = torch.cat([self.cls.expand(t.shape[0], -1, -1), t], dim=1) + self.pos
        return self.head(self.norm(self.blocks(t))[:, 0])


def init_like_hpctrain(model):
    for m in model.modules():  # hpctrain's default "fan_in_uniform": U(+-1/sqrt(fan_in)), zero bias
        if isinstance(m, (nn.Linear, nn.Conv2d)):
            # PyTorch's own default weight init is this distribution (kaiming_uniform, a=sqrt(5))
            nn.init.kaiming_uniform_(m.weight, a=5**0.5)
            nn.init.zeros_(m.bias)


def evaluate(model, x, y, rank, world, batch=1000):
    """Each rank evaluates its contiguous share of the test set; sums all-reduced."""
    n = x.shape[0]
    lo, hi = n * rank // world, n * (rank + 1) // world
    sums = torch.zeros(3, dtype=torch.float64)
    model.eval()
    with torch.no_grad():
        for s in range(lo, hi, batch):
            xb, yb = x[s:min(s + batch, hi)], y[s:min(s + batch, hi)]
            logits = model(xb)
            sums[0] += F.cross_entropy(logits, yb, reduction="sum").item()
            sums[1] += (logits.argmax(1) == yb).sum().item()
            sums[2] += yb.numel()
    model.train()
    if world > 1:
        dist.all_reduce(sums)
    return sums[0].item() / max(sums[2].item(), 1), sums[1].item() / max(sums[2].item(), 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="mlp", choices=["mlp", "cnn", "resnet", "transformer"])
    ap.add_argument("--data", required=True, help="training split (hpctrain HDF5)")
    ap.add_argument("--eval-data", default="", help="test split (hpctrain HDF5); empty: no evaluation")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--max-steps", type=int, default=0, help="0: no limit")
    ap.add_argument("--global-batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--warmup-steps", type=int, default=5, help="steps excluded from samples/s")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    ap.add_argument("--hidden", default="512,256", help="mlp: hidden widths (hpctrain's \"hidden\")")
    ap.add_argument("--model-config", default="",
                    help="an hpctrain model config (JSON: name mlp|cnn, hidden, channels, kernel, pool; "
                         "ReLU only; or name resnet, channels, blocks); overrides --model and --hidden")
    ap.add_argument("--optimizer", default="sgd", choices=["sgd", "adamw"])
    ap.add_argument("--zero", action="store_true",
                    help="ZeRO-1: torch.distributed.optim.ZeroRedundancyOptimizer around the optimiser "
                         "(the peer of hpctrain's --strategy zero1)")
    ap.add_argument("--mean", type=float, default=MEAN)
    ap.add_argument("--std", type=float, default=STD)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    rank, world = rank_and_world()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    if world > 1:
        dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world)
    B = args.global_batch
    if B % world:
        raise SystemExit(f"torch_ddp.py: global batch {B} not divisible by {world} ranks")
    local = B // world

    x_train, y_train = load_split(args.data, args.mean, args.std)
    x_test = y_test = None
    if args.eval_data:
        x_test, y_test = load_split(args.eval_data, args.mean, args.std)

    torch.manual_seed(args.seed)  # same initial parameters on every rank (DDP broadcasts rank 0's anyway)
    if args.model_config:
        with open(args.model_config) as f:
            cfg = json.load(f)
        unknown = set(cfg) - {"name", "hidden", "channels", "kernel", "pool", "activation"}
        if cfg.get("name") == "resnet":
            unknown = set(cfg) - {"name", "channels", "blocks"}
            if unknown:
                raise SystemExit(f"torch_ddp.py: {args.model_config}: a resnet config mirrors only channels and "
                                 f"blocks (got {sorted(cfg)})")
            model = build_resnet(cfg.get("channels", [16, 32, 64]), cfg.get("blocks", 1))
        elif cfg.get("name") == "transformer":
            keys = {"patch", "dim", "depth", "heads", "mlp_dim"}
            if set(cfg) - keys - {"name"}:
                raise SystemExit(f"torch_ddp.py: {args.model_config}: a transformer config mirrors only "
                                 f"{sorted(keys)} (got {sorted(cfg)})")
            model = VisionTransformer(**{k: cfg[k] for k in keys if k in cfg})
        elif unknown or cfg.get("activation", "relu") != "relu" or cfg.get("name") not in ("mlp", "cnn"):
            raise SystemExit(f"torch_ddp.py: {args.model_config}: only name mlp|cnn, hidden, channels, kernel, "
                             f"pool and ReLU are mirrored (got {sorted(cfg)})")
        else:
            name = cfg["name"]
            model = build_model(name, cfg.get("hidden", [512, 256] if name == "mlp" else [256]),
                                cfg.get("channels", [32, 64]), cfg.get("kernel", 5), cfg.get("pool", 2))
    elif args.model == "resnet":
        model = build_resnet()
    elif args.model == "transformer":
        model = VisionTransformer()
    elif args.model == "cnn":
        model = build_model("cnn", [256])
    else:
        model = build_model(args.model, [int(h) for h in args.hidden.split(",") if h])
    model_label = os.path.basename(args.model_config).removesuffix(".json") if args.model_config else args.model
    ddp = nn.parallel.DistributedDataParallel(model) if world > 1 else model
    if args.optimizer == "adamw":
        opt_class, opt_args = torch.optim.AdamW, {"lr": args.lr, "weight_decay": 0.0}
    else:
        opt_class, opt_args = torch.optim.SGD, {"lr": args.lr, "momentum": args.momentum}
    if args.zero and world > 1:
        from torch.distributed.optim import ZeroRedundancyOptimizer
        opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=opt_class, **opt_args)
    else:
        opt = opt_class(ddp.parameters(), **opt_args)

    n = x_train.shape[0]
    batches = n // B  # drop the last partial global batch, as hpctrain does by default
    total_steps = batches * args.epochs
    if args.max_steps > 0:
        total_steps = min(total_steps, args.max_steps)

    step = 0
    t_start = None
    eval_s = compute_s = data_s = 0.0
    test_loss = test_acc = None
    loss_value = float("nan")
    run_start = time.perf_counter()
    cpu_start = time.process_time()  # this process, all threads (gloo's included)
    for epoch in range(args.epochs):
        if step >= total_steps:
            break
        g = torch.Generator()
        g.manual_seed(args.seed * 1000003 + epoch)  # one global permutation per (seed, epoch)
        perm = torch.randperm(n, generator=g)
        for b in range(batches):
            if step >= total_steps:
                break
            t0 = time.perf_counter()
            idx = perm[b * B + rank * local: b * B + (rank + 1) * local]
            xb = x_train.index_select(0, idx)
            yb = y_train.index_select(0, idx)
            t1 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(ddp(xb), yb)
            loss.backward()  # DDP's bucketed all-reduce overlaps with this
            opt.step()
            t2 = time.perf_counter()
            data_s += t1 - t0
            compute_s += t2 - t1
            step += 1
            if step == args.warmup_steps:
                t_start = time.perf_counter()
        loss_value = loss.item()
        if x_test is not None:
            e0 = time.perf_counter()
            test_loss, test_acc = evaluate(model, x_test, y_test, rank, world)
            eval_s += time.perf_counter() - e0
    t_end = time.perf_counter()
    cpu_util = (time.process_time() - cpu_start) / max(t_end - run_start, 1e-12)

    measured_steps = step - args.warmup_steps
    measured_s = (t_end - t_start - eval_s) if t_start is not None else 0.0
    if world > 1:
        slowest = torch.tensor([measured_s], dtype=torch.float64)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        measured_s = slowest.item()
    rate = measured_steps * B / measured_s if measured_steps > 0 and measured_s > 0 else 0.0
    # Memory per rank (largest over the ranks): optimiser state (ZeRO: this rank's shard) and
    # peak RSS, as hpctrain's --metrics summary reports them.
    local_opt = opt.optim if hasattr(opt, "optim") else opt
    state_bytes = sum(t.numel() * t.element_size() for st in local_opt.state.values()
                      for t in st.values() if torch.is_tensor(t) and t.dim() > 0)
    memory = torch.tensor([state_bytes, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024],
                          dtype=torch.float64)
    if world > 1:
        dist.all_reduce(memory, op=dist.ReduceOp.MAX)
    if rank == 0:
        print(json.dumps({
            "side": "torch", "model": model_label, "ranks": world, "global_batch": B,
            "epochs": args.epochs, "steps": step, "warmup_steps": args.warmup_steps,
            "samples_per_s": rate, "test_accuracy": test_acc, "test_loss": test_loss,
            "final_loss": loss_value, "seconds": t_end - run_start,
            "compute_s": compute_s, "data_s": data_s, "eval_s": eval_s, "cpu_util": cpu_util,
            "torch": torch.__version__, "threads": torch.get_num_threads(),
            "optimizer": args.optimizer, "zero": bool(args.zero and world > 1),
            "parameters": sum(p.numel() for p in model.parameters()),
            "optimizer_state_bytes": int(memory[0].item()), "peak_rss_bytes": int(memory[1].item()),
        }), flush=True)
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
