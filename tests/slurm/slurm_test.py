#!/usr/bin/env python3
"""Slurm tests against a real one-node cluster (scripts/slurm-local.sh, started by the ctest
fixture). Usage: slurm_test.py SCENARIO --repo DIR --bin DIR --work DIR

Scenarios:
  templates    every template passes `sbatch --test-only` (GPU template with --gpus-per-task=0)
  train-cpu    train-cpu.sbatch trains on 2 ranks through srun --mpi=pmix
  preemptible  USR1 mid-run -> checkpoint, exit 75, requeue (SLURM_RESTART_COUNT=1), resume;
               final parameters identical to an uninterrupted run with the same seed
  scaling      scaling-strong/-weak at ranks 1 and 2 leave one JSON result per point
  sweep        sweep.sbatch: USR1 after the first trials -> exit 75, requeue, --resume; every
               trial recorded exactly once, best/ present
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path


def fail(msg):
    print(f"FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def run(cmd, **kw):
    print("+", " ".join(str(c) for c in cmd), flush=True)
    return subprocess.run(cmd, text=True, capture_output=True, **kw)


def job_fields(jid):
    out = run(["scontrol", "-o", "show", "job", str(jid)]).stdout
    return dict(re.findall(r"(\w+)=(\S*)", out))


def wait_job(jid, timeout_s, until=("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")):
    # sbatch --wait polls ever more slowly; poll scontrol instead.
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        f = job_fields(jid)
        if f.get("JobState") in until:
            return f
        time.sleep(1)
    subprocess.run(["scancel", str(jid)])
    fail(f"job {jid} did not finish within {timeout_s} s (state {job_fields(jid).get('JobState')})")


def submit(script, work, env, *sbatch_args):
    r = run(["sbatch", "--parsable", f"--chdir={work}", *sbatch_args, str(script)], env=env)
    if r.returncode != 0:
        fail(f"sbatch {script.name}: {r.stderr.strip()}")
    return int(r.stdout.strip().split(";")[0])


def checksums(text):
    return re.findall(r"final parameter checksum (xxh3:[0-9a-f]+)", text)


def scenario_templates(a, env):
    # This machine has 2 cores and no GPU: shrink the templates' allocations to fit it.
    extra = {"train-gpu.sbatch": ["--gpus-per-task=0", "--nodes=1", "--ntasks-per-node=1", "--cpus-per-task=1"],
             "scaling-strong.sbatch": ["--ntasks-per-node=2"], "scaling-weak.sbatch": ["--ntasks-per-node=2"]}
    for script in sorted((a.repo / "slurm").glob("*.sbatch")):
        r = run(["sbatch", "--test-only", *extra.get(script.name, []), str(script)], env=env)
        print(r.stdout + r.stderr)
        if r.returncode != 0 or "to start at" not in r.stderr:
            fail(f"sbatch --test-only rejected {script.name}")
        text = script.read_text()
        if re.search(r"/(home|work|scratch|gpfs|lustre)/", text):
            fail(f"{script.name} bakes in a site-specific path")
    print("templates: all accepted")


def scenario_train_cpu(a, env):
    out = a.work / "train-cpu.out"
    env = dict(env, EPOCHS="1", EXTRA_ARGS="--max-steps 60 --log-every 20")
    jid = submit(a.repo / "slurm/train-cpu.sbatch", a.work, env, f"--output={out}", "--ntasks-per-node=2")
    f = wait_job(jid, 300)
    text = out.read_text()
    print(text)
    if f["JobState"] != "COMPLETED":
        fail(f"train-cpu job ended {f['JobState']}")
    for needle in ["2 ranks", "step 60/60", "test accuracy", "final parameter checksum"]:
        if needle not in text:
            fail(f"train-cpu output lacks '{needle}'")
    acc = float(re.search(r"test accuracy ([0-9.]+)%", text).group(1))
    if acc < 60.0:  # 60 steps of batch 128 reach about 75%; chance is 10%
        fail(f"test accuracy {acc}% too low")


def preempt_when(jid, env, out, ready, what, poll_s):
    """USR1 to the batch shell of `jid` once `ready()` holds (else fail naming `what`); then
    waits for the job (requeue included) and returns its scontrol fields and its output."""
    deadline = time.time() + 180
    while time.time() < deadline:
        if ready():
            break
        time.sleep(poll_s)
    else:
        fail(what)
    r = run(["scancel", "--signal=USR1", "--batch", str(jid)], env=env)
    if r.returncode != 0:
        fail(f"scancel: {r.stderr}")
    f = wait_job(jid, 400)
    text = out.read_text()
    print(text)
    return f, text


def scenario_preemptible(a, env):
    out = a.work / "preemptible.out"
    ckpt = a.work / "preemptible-ckpt"
    # Long enough that the signal lands mid-run: scancel's USR1 has taken up to ~4.5 s to reach
    # the job under a loaded ctest, and with libxsmm's gemms (stop 43) 2400 steps took 5.4 s, so
    # the signal once arrived after the last step; 6000 steps are ~13 s.
    steps = 6000
    args = f"--max-steps {steps} --no-eval --log-every 10"
    env = dict(env, EPOCHS="13", SEED="7", CHECKPOINT_EVERY="1000", CHECKPOINT_DIR=str(ckpt), EXTRA_ARGS=args)
    jid = submit(a.repo / "slurm/preemptible.sbatch", a.work, env, f"--output={out}", "--open-mode=append")

    def well_under_way():  # signal once training is well under way
        return out.exists() and re.search(rf"step (4|5|6|7|8|9)0/{steps}", out.read_text())

    f, text = preempt_when(jid, env, out, well_under_way, "preemptible job never reached step 40", 0.3)
    if f["JobState"] != "COMPLETED":
        fail(f"preemptible job ended {f['JobState']}")
    if f.get("Restarts") != "1":
        fail(f"expected 1 restart, scontrol says Restarts={f.get('Restarts')}")
    for needle in ["USR1 received", "(preemption)", "exiting with 75", "requeueing job",
                   "restart 1", "resumed from", "finished with status 0"]:
        if needle not in text:
            fail(f"preemptible output lacks '{needle}'")
    resumed = re.search(r"resumed from \S+/step-(\d+)", text)
    if not resumed or int(resumed.group(1)) < 40 or int(resumed.group(1)) >= steps:
        fail("did not resume from the preemption checkpoint")
    final = checksums(text)[-1]
    # The uninterrupted run: same seed, same options, same rank count, no interruption.
    base = ["srun", "--mpi=pmix", "-n", "2", str(a.bin / "hpctrain"), "train", "--model", "mlp", "--epochs", env["EPOCHS"],
            "--global-batch", "128", "--lr", "0.05", "--seed", "7", *args.split()]
    # Same threading as the batch job (the template sets OMP_NUM_THREADS from --cpus-per-task):
    # OpenBLAS splits a gemm by its thread count, which changes the summation order.
    r = run(base, env=dict(env, OMP_NUM_THREADS="1"))
    print(r.stdout, r.stderr)
    if r.returncode != 0:
        fail("uninterrupted run failed")
    reference = checksums(r.stdout)[-1]
    print(f"preempted+resumed {final} vs uninterrupted {reference}")
    if final != reference:
        fail("final parameters differ from the uninterrupted run")


def scenario_sweep(a, env):
    data = a.work / "train-2048.h5"
    fm = Path("/usr/share/datasets/fashion-mnist")
    r = run([str(a.bin / "hpctrain"), "data", "import-idx", "--limit", "2048", "--fashion-mnist",
             "--images", str(fm / "train-images-idx3-ubyte.gz"), "--labels", str(fm / "train-labels-idx1-ubyte.gz"),
             "--out", str(data)], env=env)
    if r.returncode != 0:
        fail(f"import: {r.stderr}")
    space = a.work / "space.json"
    space.write_text(json.dumps({"base": {"data": str(data), "eval-data": str(data), "epochs": 4, "global-batch": 32,
                                          "log-every": 0},
                                 "search": {"lr": {"loguniform": [0.001, 0.1]}}, "seed": 1}))
    out, sweep_out = a.work / "sweep.out", a.work / "sweep-dir"
    env = dict(env, HPCTRAIN=str(a.bin / "hpctrain"), SPACE=str(space), OUT=str(sweep_out), SCHEDULER="none",
               MAX_TRIALS="12")
    jid = submit(a.repo / "slurm/sweep.sbatch", a.work, env, f"--output={out}", "--open-mode=append")
    results = sweep_out / "results.jsonl"
    # Signal once some trials are recorded.
    f, text = preempt_when(jid, env, out, lambda: results.exists() and len(results.read_text().splitlines()) >= 2,
                           "the sweep job recorded no trials", 0.2)
    if f["JobState"] != "COMPLETED" or f.get("Restarts") != "1":
        fail(f"sweep job ended {f['JobState']} after {f.get('Restarts')} restarts (expected COMPLETED after 1)")
    for needle in ["USR1 received", "requeueing job", "restart 1", "finished with status 0"]:
        if needle not in text:
            fail(f"sweep output lacks '{needle}'")
    trials = [json.loads(line)["trial"] for line in results.read_text().splitlines()]
    if sorted(trials) != list(range(12)):
        fail(f"trials recorded {sorted(trials)}: each of 0..11 exactly once expected")
    if not list((sweep_out / "best").glob("step-*")):
        fail("no best/ checkpoint")
    print("sweep: preempted, requeued, resumed; 12 trials recorded once each")


def scenario_scaling(a, env):
    for mode in ("strong", "weak"):
        results = a.work / f"scaling-{mode}"
        out = a.work / f"scaling-{mode}.out"
        e = dict(env, BIN_DIR=str(a.bin), RESULTS=str(results), RANKS_LIST="1 2", STEPS="15",
                 BENCH_MAX_BYTES="65536", GLOBAL_BATCH="64", PER_RANK_BATCH="32",
                 SCALING_SCRIPT=str(a.repo / "slurm/scaling-strong.sbatch"))
        jid = submit(a.repo / f"slurm/scaling-{mode}.sbatch", a.work, e, f"--output={out}", "--ntasks-per-node=2")
        f = wait_job(jid, 600)
        print(out.read_text())
        if f["JobState"] != "COMPLETED":
            fail(f"scaling-{mode} ended {f['JobState']}")
        for p in (1, 2):
            bench = json.loads((results / f"allreduce-p{p}.json").read_text())
            names = [b["name"] for b in bench["benchmarks"]]
            if not any("ring" in n for n in names) or not any("mpi" in n for n in names):
                fail(f"allreduce-p{p}.json lacks ring or mpi rows")
            lines = (results / f"train-p{p}.jsonl").read_text().splitlines()
            summary = json.loads(lines[-1])
            want_batch = 64 if mode == "strong" else 32 * p
            if summary.get("type") != "summary" or summary["ranks"] != p or summary["global_batch"] != want_batch:
                fail(f"train-p{p}.jsonl summary wrong: {summary}")
            if not summary["samples_per_s"] > 0:
                fail(f"train-p{p}.jsonl reports no throughput")
        print(f"scaling-{mode}: JSON for P=1,2 present and consistent")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("scenario")
    ap.add_argument("--repo", type=Path, required=True)
    ap.add_argument("--bin", type=Path, required=True)
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--slurm-dir", type=Path, required=True)
    a = ap.parse_args()
    a.work = a.work / a.scenario
    subprocess.run(["rm", "-rf", str(a.work)])
    a.work.mkdir(parents=True)
    os.environ["SLURM_CONF"] = str(a.slurm_dir / "slurm.conf")  # every client command talks to this cluster
    env = dict(os.environ, HPCTRAIN=str(a.bin / "hpctrain"), HPCTRAIN_DATA_DIR=str(a.work.parent / "data"))
    {"templates": scenario_templates, "train-cpu": scenario_train_cpu, "preemptible": scenario_preemptible,
     "scaling": scenario_scaling, "sweep": scenario_sweep}[a.scenario](a, env)
    print(f"{a.scenario}: PASS")


if __name__ == "__main__":
    main()
