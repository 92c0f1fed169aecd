"""`hpctrain sweep` end to end, one scenario per ctest entry (tests/sweep/CMakeLists.txt).

Every run is the real command under mpiexec with a timeout. What a sweep writes is checked
against sources it does not write itself: each trial's own --metrics JSONL (written by the
trainer), the checkpoint manifests, and `hpctrain ckpt inspect`.
"""
import argparse
import glob
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import time

A = None  # parsed arguments


def fail(msg):
    print(f"check_sweep: FAILED: {msg}", file=sys.stderr)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def write_space(name, space):
    path = os.path.join(A.workdir, name)
    with open(path, "w") as f:
        json.dump(space, f)
    return path


def base(**extra):
    b = {"data": A.data, "eval-data": A.data, "global-batch": 64, "log-every": 0, "model": "mlp", "epochs": 2}
    b.update(extra)
    return b


def sweep_cmd(np, space, out, *args):
    return [A.mpiexec, "-n", str(np), "--oversubscribe", A.hpctrain, "sweep", "--space", space, "--out", out, *args]


def run(np, space, out, *args, expect=0):
    p = subprocess.run(sweep_cmd(np, space, out, *args), capture_output=True, text=True, timeout=240)
    if expect is not None and p.returncode != expect:
        fail(f"sweep exited {p.returncode}, expected {expect}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}")
    return p


def results(out):
    return [json.loads(line) for line in open(os.path.join(out, "results.jsonl"))]


def trial_metrics(out, trial):
    """The trainer's own JSONL records of a trial, every run (segment) in order."""
    files = sorted(glob.glob(os.path.join(out, "trials", str(trial), "metrics*.jsonl")),
                   key=lambda f: (len(f), f))
    return [[json.loads(line) for line in open(f)] for f in files]


def manifest_checksum(step_dir):
    return json.load(open(os.path.join(step_dir, "manifest.json")))["metadata"]["parameter_checksum"]


def check_records(out, n, statuses, max_epochs):
    recs = results(out)
    check(sorted(r["trial"] for r in recs) == list(range(n)), f"trials recorded: {[r['trial'] for r in recs]}")
    for r in recs:
        for key in ("trial", "params", "status", "test_accuracy", "test_loss", "epochs_run", "seconds"):
            check(key in r, f"record {r} lacks {key}")
        check(r["status"] in statuses, f"trial {r['trial']} status {r['status']} not in {statuses}")
        if r["status"] == "failed":
            check(r.get("error"), f"failed trial {r['trial']} has no error")
            continue
        check(r["status"] != "completed" or r["epochs_run"] == max_epochs,
              f"completed trial {r['trial']} ran {r['epochs_run']} epochs, not {max_epochs}")
        check(r["status"] != "stopped" or r["epochs_run"] < max_epochs, f"stopped trial {r['trial']} ran all epochs")
        last_eval = [e for e in trial_metrics(out, r["trial"])[-1] if e["type"] == "eval"][-1]
        check(last_eval["accuracy"] == r["test_accuracy"] and last_eval["loss"] == r["test_loss"],
              f"trial {r['trial']}: record {r['test_accuracy']}/{r['test_loss']} != its last eval {last_eval}")
        check(last_eval["epoch"] + 1 == r["epochs_run"], f"trial {r['trial']}: epochs_run vs its eval records")
    return recs


def check_best(out, recs):
    summary = json.load(open(os.path.join(out, "summary.json")))
    ok = [r for r in recs if r["status"] != "failed"]
    best = max(ok, key=lambda r: r["test_accuracy"])
    check(summary["best_test_accuracy"] == best["test_accuracy"], f"summary {summary} vs best record {best}")
    check(summary["trials"] == len(recs), f"summary trials {summary['trials']} != {len(recs)}")
    best = [r for r in recs if r["trial"] == summary["best_trial"]][0]
    check(summary["best_params"] == best["params"], "best_params differ from the best record's")
    p = subprocess.run([A.hpctrain, "ckpt", "inspect", os.path.join(out, "best")], capture_output=True, text=True,
                       timeout=60)
    check(p.returncode == 0 and "all shard sizes and checksums verify" in p.stdout,
          f"ckpt inspect best/: {p.returncode}\n{p.stdout}\n{p.stderr}")
    step = glob.glob(os.path.join(out, "best", "step-*"))
    check(len(step) == 1, f"best/ holds {step}")
    # best/ holds the parameters the best trial ended with (the trainer's own summary record),
    # and that run's accuracy is the best record's.
    final = [e for e in trial_metrics(out, best["trial"])[-1] if e["type"] == "summary"][-1]
    check(manifest_checksum(step[0]) == final["parameter_checksum"], "best/ is not the best trial's final checkpoint")
    check(final["eval_accuracy"] == best["test_accuracy"], "the best trial's final accuracy differs from its record")
    with open(os.path.join(out, "metric.png"), "rb") as f:
        check(f.read(8) == b"\x89PNG\r\n\x1a\n", "metric.png is not a PNG")


def scenario_asha_np2():
    space = write_space("asha.json", {"base": base(epochs=4), "search": {
        "lr": {"loguniform": [0.001, 0.3]}, "momentum": {"choice": [0.0, 0.9]}}, "seed": 3})
    out = os.path.join(A.workdir, "out")
    p = run(2, space, out, "--ranks-per-trial", "1", "--scheduler", "asha", "--max-trials", "4")
    recs = check_records(out, 4, {"completed", "stopped"}, 4)
    check_best(out, recs)
    print(p.stdout)
    # --seed overrides SPACE.json's seed: other trial parameters (the same ones for the same seed).
    out2, out3 = os.path.join(A.workdir, "out-seed9"), os.path.join(A.workdir, "out-seed9-again")
    for o in (out2, out3):
        run(2, space, o, "--max-trials", "2", "--seed", "9")
    params = {o: [r["params"] for r in sorted(results(o), key=lambda r: r["trial"])] for o in (out, out2, out3)}
    check(params[out2] == params[out3], "the same --seed drew other parameters")
    check(params[out2] != params[out][:2], "--seed 9 drew SPACE.json's seed-3 parameters")


def scenario_grid_np4():
    space = write_space("grid.json", {"base": base(), "search": {"lr": {"grid": [0.01, 0.05]}},
                                      "search_algorithm": "grid"})
    out = os.path.join(A.workdir, "out")
    run(4, space, out, "--ranks-per-trial", "2", "--max-trials", "2", "--tensorboard")
    recs = check_records(out, 2, {"completed"}, 2)
    for r in recs:  # the HParams session's and the trainer's event files, by the group's rank 0
        events = glob.glob(os.path.join(out, "trials", str(r["trial"]), "tensorboard", "events.out.tfevents.*"))
        check(len(events) == 2 and all(os.path.getsize(e) > 100 for e in events),
              f"trial {r['trial']} event files: {events}")
    check(sorted(r["params"]["lr"] for r in recs) == [0.01, 0.05], f"grid params {[r['params'] for r in recs]}")
    check_best(out, recs)


def scenario_deterministic():
    b = base(deterministic=True)
    del b["global-batch"]
    space = write_space("det.json", {"base": b, "search": {
        "lr": {"uniform": [0.01, 0.1]}, "global_batch": {"choice": [32, 64]}}, "seed": 11})
    runs = {}
    for np, k in ((2, 1), (4, 2)):
        out = os.path.join(A.workdir, f"out-np{np}-k{k}")
        run(np, space, out, "--ranks-per-trial", str(k), "--max-trials", "3", "--scheduler", "none", "--seed", "5")
        recs = sorted(check_records(out, 3, {"completed"}, 2), key=lambda r: r["trial"])
        sums = [[e for e in trial_metrics(out, r["trial"])[-1] if e["type"] == "summary"][-1]["parameter_checksum"]
                for r in recs]
        runs[(np, k)] = ([(r["params"], r["test_accuracy"], r["test_loss"], r["epochs_run"]) for r in recs], sums)
    a, b = runs[(2, 1)], runs[(4, 2)]
    check(a[0] == b[0], f"np 2 K 1 and np 4 K 2 differ:\n{a[0]}\n{b[0]}")
    check(a[1] == b[1], f"final parameter checksums differ: {a[1]} vs {b[1]}")
    # A trial is the ordinary trainer: `hpctrain train` at np 3 with trial 0's options ends
    # with the same parameters.
    params = a[0][0][0]
    metrics = os.path.join(A.workdir, "plain.jsonl")
    cmd = [A.mpiexec, "-n", "3", "--oversubscribe", A.hpctrain, "train", "--data", A.data, "--eval-data", A.data,
           "--epochs", "2", "--log-every", "0", "--deterministic", "--lr", str(params["lr"]),
           "--global-batch", str(params["global-batch"]), "--metrics", metrics, "--quiet"]
    subprocess.run(cmd, check=True, timeout=120)
    plain = [json.loads(line) for line in open(metrics)][-1]
    check(plain["parameter_checksum"] == a[1][0], f"hpctrain train {plain['parameter_checksum']} != trial 0 {a[1][0]}")


def scenario_failing_trial():
    space = write_space("fail.json", {"base": base(), "search_algorithm": "grid", "search": {
        "optimizer": {"grid": ["sgd", "bogus"]}, "lr": {"grid": [0.05, 1e30]}}})
    out = os.path.join(A.workdir, "out")
    run(2, space, out, "--ranks-per-trial", "1", "--max-trials", "0")
    # Grid order: lr slowest (keys in name order): (0.05, sgd), (0.05, bogus), (1e30, sgd), (1e30, bogus).
    recs = {r["trial"]: r for r in check_records(out, 4, {"completed", "failed"}, 2)}
    check(recs[0]["status"] == "completed", f"sgd lr 0.05 should train: {recs[0]}")
    check(recs[2]["status"] == "failed" and "finite" in recs[2]["error"], f"lr 1e30 should fail non-finite: {recs[2]}")
    for t in (1, 3):
        check(recs[t]["status"] == "failed" and "unknown optimiser 'bogus'" in recs[t]["error"], f"{recs[t]}")


def scenario_resume():
    """--scheduler none with "deterministic": interrupted with a trial mid-way, resumed: each trial
    once, finished ones untouched, and a trial continued from its checkpoint ends with the bytes
    of the same training uninterrupted at another rank count."""
    # The CNN at batch 16 (it diverges near lr 0.1): an epoch lasts long enough for the SIGTERM
    # to land within it (an MLP trial of the test file takes ~70 ms, so the sweep could finish
    # between poll and signal).
    space = write_space("resume.json", {"base": base(epochs=3, deterministic=True, model="cnn", **{"global-batch": 16}),
                                        "search": {"lr": {"uniform": [0.005, 0.04]}}, "seed": 2})
    out = os.path.join(A.workdir, "out")
    proc = subprocess.Popen(sweep_cmd(2, space, out, "--max-trials", "8"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    interrupt_when(proc, lambda: mid_trial(out, 3), "a trial could be interrupted mid-way")
    done = {r["trial"] for r in results(out)}
    check(0 < len(done) < 8, f"after the interruption {len(done)} of 8 trials are recorded")
    mtimes = {t: os.path.getmtime(os.path.join(out, "trials", str(t), "metrics.jsonl")) for t in done}
    p = run(2, space, out, "--max-trials", "8", "--resume")
    for t in done:
        check(f"sweep: trial {t} on the group" not in p.stdout, f"--resume ran finished trial {t} again:\n{p.stdout}")
        check(os.path.getmtime(os.path.join(out, "trials", str(t), "metrics.jsonl")) == mtimes[t],
              f"trial {t}'s files were rewritten by --resume")
    recs = check_records(out, 8, {"completed"}, 3)
    check(len(recs) == 8, f"{len(recs)} records after resume, expected 8 (each trial once)")
    check_best(out, recs)
    continued = [r for r in recs if r.get("continued")]
    check(continued, f"no trial was continued from its checkpoint: {recs}")
    for r in continued:  # the same training uninterrupted, by `hpctrain train` at np 3
        metrics = os.path.join(A.workdir, f"plain-{r['trial']}.jsonl")
        cmd = [A.mpiexec, "-n", "3", "--oversubscribe", A.hpctrain, "train", "--data", A.data, "--eval-data", A.data,
               "--epochs", "3", "--log-every", "0", "--deterministic", "--lr", str(r["params"]["lr"]),
               "--model", "cnn", "--global-batch", "16", "--metrics", metrics, "--quiet"]
        subprocess.run(cmd, check=True, timeout=120)
        plain = [json.loads(line) for line in open(metrics)][-1]["parameter_checksum"]
        final = [e for e in trial_metrics(out, r["trial"])[-1] if e["type"] == "summary"][-1]["parameter_checksum"]
        check(final == plain, f"continued trial {r['trial']} ends with {final}, uninterrupted training with {plain}")


def mid_trial(out, epochs):
    """A trial has finished, and another was told to continue after an epoch before its last
    but one, so it has the rest of this epoch and a whole one more to train before it can finish.
    (A trial in its last epoch may be past its last step, in the final evaluation, when the
    signal lands: it then completes, and nothing is cut.)"""
    try:
        done = {r["trial"] for r in results(out)}
        latest = {r["trial"]: r for r in journal(out)}
        return bool(done) and any(t not in done and r["epochs"] < epochs - 1 and r["decision"]["action"] == "continue"
                                  for t, r in latest.items())
    except (OSError, ValueError, KeyError):
        return False

def interrupt_when(proc, ready, what):
    """SIGTERM to every rank of `proc` (as Slurm does) once ready() holds; the sweep must exit 75."""
    def children():
        found = []
        for p in os.listdir("/proc"):
            try:
                if p.isdigit() and open(f"/proc/{p}/stat").read().split(") ")[1].split()[1] == str(proc.pid):
                    found.append(int(p))
            except (OSError, IndexError):
                pass  # a process that ended while the list was read
        return found
    # The ranks are listed while waiting (a scan of /proc takes longer than an epoch of the small
    # test trials on a loaded machine), so the signal follows ready() at once.
    deadline = time.time() + 120
    ranks, scanned = [], 0.0
    while time.time() < deadline and proc.poll() is None:
        if time.time() - scanned > 0.5:
            ranks, scanned = children(), time.time()
        if ranks and ready():
            break
        time.sleep(0.01)
    check(proc.poll() is None, f"the sweep ended before {what}")
    for r in ranks:
        os.kill(r, signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    check(proc.returncode == 75, f"interrupted sweep exited {proc.returncode}, not 75\n{stdout}\n{stderr}")


def journal(out):
    """reports.jsonl's records in order (a line cut short by a kill is skipped, as --resume does)."""
    recs = []
    for line in open(os.path.join(out, "reports.jsonl")):
        try:
            recs.append(json.loads(line))
        except ValueError:
            pass
    return recs


def asha_decisions(reports, rungs, rf):
    """An independent ASHA (numpy percentile) fed the journal in order: (action, basis) per report."""
    import numpy as np
    recorded = {m: {} for m in rungs}
    out = []
    for r in reports:
        decision = ("continue", {})
        for m in reversed(rungs):
            if r["epochs"] < m:
                continue
            if r["trial"] in recorded[m]:
                break
            s = float("nan") if r["metric"] is None else r["metric"]
            scores = [v for v in recorded[m].values() if v == v]
            cutoff = float(np.percentile(scores, (1 - 1 / rf) * 100)) if scores else None
            stop = s != s or (cutoff is not None and s < cutoff)
            decision = ("stop" if stop else "continue", {"rung": m, "rung_size": len(recorded[m]), "cutoff": cutoff})
            recorded[m][r["trial"]] = s
            break
        out.append(decision)
    return out


def scenario_resume_asha():
    """ASHA at np 2 interrupted with a trial mid-way, resumed: the scheduler's rungs and the
    interrupted trials' progress survive the interruption."""
    # The CNN at batch 16 (32 steps an epoch): an epoch lasts long enough for the SIGTERM to land
    # within it; an MLP epoch of the test file is over between the poll and the signal.
    space = write_space("asha.json", {"base": base(epochs=4, model="cnn", **{"global-batch": 16}),
                                      "search": {"lr": {"loguniform": [0.002, 0.04]}}, "seed": 3})
    out = os.path.join(A.workdir, "out")
    args = ("--max-trials", "8", "--scheduler", "asha")
    proc = subprocess.Popen(sweep_cmd(2, space, out, *args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    interrupt_when(proc, lambda: mid_trial(out, 4), "a trial could be interrupted mid-way")
    before = {r["trial"]: r for r in results(out)}
    pre = journal(out)
    pre_epochs = {}
    for r in pre:
        pre_epochs.setdefault(r["trial"], []).append(r["epochs"])
    cut = {t: e for t, e in pre_epochs.items() if t not in before}
    check(cut and len(before) < 8, f"nothing interrupted mid-way: records {sorted(before)}, reports {pre_epochs}")
    mtimes = {t: os.path.getmtime(os.path.join(out, "trials", str(t), "metrics.jsonl")) for t in before}
    p = run(2, space, out, *args, "--resume")
    print(p.stdout)
    recs = {r["trial"]: r for r in check_records(out, 8, {"completed", "stopped"}, 4)}
    check(len(results(out)) == 8, "a trial is recorded twice")
    for t, r in before.items():  # completed trials are not rerun: their records and files stay
        check(f"sweep: trial {t} on the group" not in p.stdout, f"--resume ran finished trial {t} again")
        check(recs[t] == r, f"trial {t}'s record changed: {r} -> {recs[t]}")
        check(os.path.getmtime(os.path.join(out, "trials", str(t), "metrics.jsonl")) == mtimes[t],
              f"trial {t}'s files were rewritten by --resume")
    reports = journal(out)
    check(reports[:len(pre)] == pre, "the journal before the interruption was rewritten")
    keys = [(r["trial"], r["segment"], r["epochs"]) for r in reports]
    check(len(keys) == len(set(keys)), f"an epoch result was journaled twice: {keys}")
    # Interrupted trials went on from their own checkpoint: no epoch they had reported runs
    # again, their metrics file holds both runs' records with each epoch evaluated once.
    for t, epochs in cut.items():
        after = [r["epochs"] for r in reports[len(pre):] if r["trial"] == t]
        check(recs[t].get("continued") is True, f"interrupted trial {t} was not continued: {recs[t]}")
        check(not after or min(after) > max(epochs), f"trial {t} reported {epochs}, then again {after} after resume")
        runs = trial_metrics(out, t)[0]
        evals = [e["epoch"] for e in runs if e["type"] == "eval"]
        check(evals == sorted(set(evals)) and evals[:len(epochs)] == [e - 1 for e in epochs],
              f"trial {t}'s eval records {evals} (reported {epochs} before the interruption)")
        check(sum(e["type"] == "summary" for e in runs) == 2, f"trial {t}: not two runs in its metrics file")
    # Every decision, before and after the resume, is the one an ASHA fed the whole journal in
    # order takes; and some decision after the resume stands on rung entries from before it.
    model = asha_decisions(reports, [1, 2, 4], 2.0)
    for r, (action, basis) in zip(reports, model):
        got = r["decision"]
        check(got["action"] == action and got["basis"].keys() == basis.keys() and
              all(got["basis"][k] == basis[k] if k != "cutoff" or basis[k] is None else
                  abs(got["basis"][k] - basis[k]) < 1e-12 for k in basis),
              f"decision {got} on {r} differs from the reference ASHA's {action} {basis}")
    pre_rungs = {}
    for (action, basis) in model[:len(pre)]:
        if basis:
            pre_rungs[basis["rung"]] = pre_rungs.get(basis["rung"], 0) + 1
    check(any(b and pre_rungs.get(b["rung"], 0) > 0 and b["rung_size"] >= pre_rungs[b["rung"]]
              for (_, b) in model[len(pre):]), "no decision after the resume used a rung with earlier entries")
    check_best(out, list(recs.values()))


def scenario_resume_pbt():
    """PBT at np 2 interrupted after an exploit, before the child finished, resumed: the child
    keeps its parent, perturbed params and run, and (once its run had reported) goes on from its
    own checkpoint. The CNN, not the MLP: an MLP trial of the 512-sample file takes ~70 ms, so
    the whole sweep could end between the poll that saw the exploit and the SIGTERM (3 runs in 4
    failed that way once the run start got faster)."""
    space = write_space("pbt.json", {"base": base(epochs=4, deterministic=True, model="cnn", **{"global-batch": 16}),
                                     "search": {"lr": {"loguniform": [0.001, 0.2]}}, "seed": 4})
    out = os.path.join(A.workdir, "out")
    args = ("--max-trials", "4", "--scheduler", "pbt", "--pbt-quantile", "0.5", "--max-concurrent", "2")
    proc = subprocess.Popen(sweep_cmd(2, space, out, *args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def child_mid_run():
        try:
            done = {r["trial"] for r in results(out)} if os.path.exists(os.path.join(out, "results.jsonl")) else set()
            latest = {r["trial"]: r for r in journal(out)}
            return any(t not in done and r["epochs"] < 4 and (r["segment"] >= 1 or r["decision"]["action"] == "exploit")
                       for t, r in latest.items())
        except (OSError, ValueError, KeyError):
            return False

    interrupt_when(proc, child_mid_run, "a PBT child could be interrupted mid-run")
    done = {r["trial"] for r in results(out)} if os.path.exists(os.path.join(out, "results.jsonl")) else set()
    pre = journal(out)
    lineage = {}  # trial -> the exploits it acted on before the interruption
    for r in pre:
        d = r["decision"]
        if d["action"] == "exploit" and not r["final"]:
            lineage.setdefault(r["trial"], []).append((d["donor"], d["donor_epochs"], d["params"]))
    cut = {t: e for t, e in lineage.items() if t not in done}
    check(cut, f"no child interrupted: done {done}, lineage {lineage}")
    run(2, space, out, *args, "--resume")
    recs = check_records(out, 4, {"completed"}, 4)
    check(len(results(out)) == 4, "a trial is recorded twice")
    reports = journal(out)
    check(reports[:len(pre)] == pre, "the journal before the interruption was rewritten")
    keys = [(r["trial"], r["segment"], r["epochs"]) for r in reports]
    check(len(keys) == len(set(keys)), f"an epoch result was journaled twice: {keys}")
    by_trial = {r["trial"]: r for r in recs}
    for t, exploits in cut.items():
        r = by_trial[t]
        ran = any(x["trial"] == t and x["segment"] == len(exploits) for x in pre)  # its run had reported
        check(not ran or r.get("continued") is True, f"interrupted child {t} was not continued: {r}")
        check([(x["donor"], x["epochs"]) for x in r["lineage"][:len(exploits)]] == [(d, e) for d, e, _ in exploits],
              f"child {t}'s lineage {r['lineage']} lost its exploits before the interruption {exploits}")
        first_after = [x for x in reports[len(pre):] if x["trial"] == t]
        if first_after:  # its run goes on with the perturbed params, in the same run
            check(first_after[0]["segment"] == len(exploits) and first_after[0]["params"] == exploits[-1][2],
                  f"child {t} went on as {first_after[0]}, not run {len(exploits)} with {exploits[-1][2]}")
        evals = [e["epoch"] for e in trial_metrics(out, t)[len(exploits)] if e["type"] == "eval"]
        check(evals == sorted(set(evals)), f"child {t}'s run {len(exploits)} evaluated an epoch twice: {evals}")
    check_children(out, recs)
    check_best(out, recs)


def scenario_bad_space():
    cases = {
        "unknown_distribution.json": ({"base": base(), "search": {"lr": {"gaussian": [0, 1]}}},
                                      "search.lr: unknown distribution 'gaussian'"),
        "empty_choice.json": ({"base": base(), "search": {"momentum": {"choice": []}}},
                              "search.momentum.choice: the list of values is empty"),
        "lo_above_hi.json": ({"base": base(), "search": {"lr": {"uniform": [0.5, 0.1]}}},
                             "search.lr.uniform: lo > hi"),
        "unknown_base_option.json": ({"base": base(frobnicate=3), "search": {"lr": {"uniform": [0.01, 0.1]}}},
                                     "base.frobnicate: unknown train option 'frobnicate'"),
    }
    for name, (space, needle) in cases.items():
        path = write_space(name, space)
        p = run(2, path, os.path.join(A.workdir, "out-" + name), expect=None)
        text = p.stdout + p.stderr
        check(p.returncode != 0, f"{name}: exited 0")
        check(text.count(needle) == 1 and name in text, f"{name}: expected '{needle}' once, naming the file:\n{text}")


def check_children(out, recs):
    """PBT children: lineage against their runs, each run opening with its donor's metric."""
    children = [r for r in recs if "parent" in r]
    check(children, f"no trial exploited another: {recs}")
    for c in children:
        runs = trial_metrics(out, c["trial"])
        check(c["parent"] == c["lineage"][-1]["donor"] and len(runs) == len(c["lineage"]) + 1,
              f"trial {c['trial']}: lineage {c['lineage']} vs {len(runs)} runs")
        for k, exploit in enumerate(c["lineage"]):
            # The child's run opens with an evaluation of the copied checkpoint: it must equal
            # the donor's own evaluation at that epoch (the trainer evaluates exactly).
            first = [e for e in runs[k + 1] if e["type"] == "eval"][0]
            check(first["epoch"] + 1 == exploit["epochs"], f"child {c['trial']} starts at {first}, not {exploit}")
            donor_evals = [e for m in trial_metrics(out, exploit["donor"]) for e in m
                           if e["type"] == "eval" and e["epoch"] == first["epoch"]]
            check(any(e["accuracy"] == first["accuracy"] and e["loss"] == first["loss"] for e in donor_evals),
                  f"child {c['trial']}'s first metric {first} != parent {exploit['donor']}'s {donor_evals}")


def scenario_pbt():
    space = write_space("pbt.json", {"base": base(epochs=3, deterministic=True), "search": {
        "lr": {"loguniform": [0.001, 0.2]}}, "seed": 4})
    out = os.path.join(A.workdir, "out")
    run(2, space, out, "--max-trials", "4", "--scheduler", "pbt", "--pbt-quantile", "0.5", "--max-concurrent", "2")
    recs = check_records(out, 4, {"completed"}, 3)
    check_children(out, recs)
    check_best(out, recs)


def scenario_tensorboard():
    """Run with the tools Python (tensorboard from PyPI): TensorBoard's own readers."""
    from tensorboard.backend.event_processing import event_accumulator as ea
    from tensorboard.plugins.hparams import plugin_data_pb2

    space = write_space("tb.json", {"base": base(), "search": {"lr": {"grid": [0.01, 0.05]},
                                                               "momentum": {"choice": [0.8, 0.9]}}})
    out = os.path.join(A.workdir, "out")
    run(2, space, out, "--max-trials", "2", "--tensorboard")

    def load(path):
        acc = ea.EventAccumulator(path, size_guidance={ea.SCALARS: 0})
        acc.Reload()
        return acc

    hp = load(os.path.join(out, "trials")).PluginTagToContent("hparams")
    exp = plugin_data_pb2.HParamsPluginData.FromString(hp["_hparams_/experiment"]).experiment
    check(sorted(h.name for h in exp.hparam_infos) == ["lr", "momentum"], f"experiment hparams {exp.hparam_infos}")
    check(all(h.type == 3 for h in exp.hparam_infos), "hparams are not FLOAT64")
    check(sorted(m.name.tag for m in exp.metric_infos) == ["eval/accuracy", "eval/loss"], "experiment metrics")
    for r in results(out):
        acc = load(os.path.join(out, "trials", str(r["trial"]), "tensorboard"))
        content = acc.PluginTagToContent("hparams")
        start = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"])
        end = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_end_info"])
        values = {k: v.number_value for k, v in start.session_start_info.hparams.items()}
        check(values == r["params"], f"trial {r['trial']}: session hparams {values} != record {r['params']}")
        check(end.session_end_info.status == 1, f"trial {r['trial']}: session status {end.session_end_info.status}")
        last = acc.Scalars("eval/accuracy")[-1].value
        check(last == struct.unpack("f", struct.pack("f", r["test_accuracy"]))[0],
              f"trial {r['trial']}: eval/accuracy {last} != record {r['test_accuracy']}")


def main():
    global A
    p = argparse.ArgumentParser()
    p.add_argument("scenario")
    p.add_argument("--hpctrain", required=True)
    p.add_argument("--mpiexec", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--workdir", required=True)
    A = p.parse_args()
    shutil.rmtree(A.workdir, ignore_errors=True)
    os.makedirs(A.workdir)
    globals()["scenario_" + A.scenario]()
    print(f"check_sweep: {A.scenario}: ok")


if __name__ == "__main__":
    main()
