"""The first job teaches Tula, measured (`make first-job-report`, tula-jobs(7), TULA_PROFILE).

On one isolated testbed whose site database holds only an allreduce profile of 2 nodes, per
example (examples/fashion-mnist.sbatch for tula-train, 2 epochs of 6,400 images; and
examples/pytorch-ddp.sbatch when PyTorch is installed; both test on the first 1,000 test
images here), from an empty database:

  1. first:      `sbatch --tula=auto SCRIPT`: no profile, so the job runs as submitted and
                 measures its step before it trains (TULA_PROFILE=1);
  2. planned:    `sbatch --tula=auto SCRIPT` again: planned from what the first job measured;
                 `tula explain` gives its prediction;
  3. unmeasured: `sbatch --tula=off -N K SCRIPT` at the first job's K nodes: the same job
                 without the measurement (its overhead: the first job's wall time minus this
                 one's, against the budget of min(60 s, 2 % of the time limit); its test
                 accuracy: the same as the first's for tula-train, whose seed fixes the run);
  4. repeats:    the planned job's shape twice more with `--tula=off` (-N K, TULA_BATCH_SIZE and
                 TULA_EPOCHS exported as the plan gave them): the testbed's noise floor, the
                 spread (max - min) / median of the training seconds of three identical jobs.

A row per job (results/first-job-report/runs.jsonl, with manifest.json); the report is written
from them.

Usage: python3 -m experiments.first_job_report [--results DIR] [--out FILE] [--from-rows]
Environment: FIRST_JOB_EXAMPLES (default "tula-train pytorch"; pytorch is skipped with a line
where PyTorch is not installed for TULA_PYTHON, default /usr/bin/python3)."""
import os
import re
import shutil
import subprocess
import sys

from experiments import hole
from experiments import testbed as tb

NAME = "first-job-report"
WAIT_S = 1800  # the most seconds one job may take on the testbed


def examples():
    """The examples asked for (FIRST_JOB_EXAMPLES) that can run here: [(name, script, sed pairs)]."""
    want = os.environ.get("FIRST_JOB_EXAMPLES", "tula-train pytorch").split()
    bad = [w for w in want if w not in ("tula-train", "pytorch")]
    if bad or not want:
        tb.die(NAME, "FIRST_JOB_EXAMPLES='%s': give tula-train and/or pytorch" % os.environ.get("FIRST_JOB_EXAMPLES"), 2)
    out = []
    if "tula-train" in want:
        out.append(("tula-train", "fashion-mnist.sbatch", [("--epochs 12", "--epochs 2 --limit-train 6400 --limit-test 1000")]))
    if "pytorch" in want:
        py = os.environ.get("TULA_PYTHON", "/usr/bin/python3")
        if subprocess.call([py, "-c", "import torch"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) != 0:
            tb.warn(NAME, "PyTorch is not installed for %s: the pytorch example is skipped (scripts/install-deps --torch)" % py)
        else:
            out.append(("pytorch", "pytorch-ddp.sbatch", [("--limit-train 6400", "--limit-train 6400 --limit-test 1000")]))
    return out


_DONE = re.compile(r"^(?:tula-train|pytorch_fmnist): done: train_seconds=([0-9.]+) test_accuracy=([0-9.]+)", re.M)
_MEASURED = re.compile(r"^(?:tula-train|tula): measured ([0-9]+) local batch\(es\) in ([0-9.]+) s", re.M)


def job_outcome(text):
    """From a job's output: its training seconds and test accuracy (the last done line), the
    local batches it measured and the seconds the measurement took (None where absent)."""
    done = _DONE.findall(text)
    measured = _MEASURED.findall(text)
    return {"train_seconds": float(done[-1][0]) if done else None, "test_accuracy": float(done[-1][1]) if done else None,
            "measured_batches": int(measured[-1][0]) if measured else None,
            "measure_seconds": float(measured[-1][1]) if measured else None}


def run_job(work, name, role, options, script):
    """Submits script with options, waits for its end; the row of the job."""
    out = os.path.join(work, "%s-%s-%%j.out" % (name, role))
    job = tb.submit(["--parsable", "-o", out] + list(options) + [script])
    end = hole.wait_all([job], WAIT_S, lambda m: None)[job]
    text = tb.read_text(out.replace("%j", job))
    row = {"study": NAME, "example": name, "role": role, "job": int(job), "state": end.get("JobState"),
           "nodes": tb.number(end.get("NumNodes")), "wall_seconds": hole.slurm_seconds(end.get("RunTime")),
           "time_limit_seconds": hole.slurm_seconds(end.get("TimeLimit")),
           "tula_profile": "TULA_PROFILE" in text and role == "first"}
    row.update(job_outcome(text))
    print("\t".join("%s=%s" % (k, row[k]) for k in ("example", "role", "job", "state", "nodes", "wall_seconds",
                                                    "train_seconds", "test_accuracy", "measure_seconds")), flush=True)
    return row


def measure(results):
    """Inside the cluster: the jobs of every example; writes the results folder."""
    chosen = examples()
    d = tb.in_cluster(NAME)
    sysdb = os.path.join(d, "system.db")
    work = os.path.join(d, "first-job")
    os.makedirs(work, exist_ok=True)
    p = tb.Progress(NAME)
    rows = []
    p.step("allreduce profile on 2 nodes (the site's one step, for every workload)")
    tb.run(["tula", "profile", "allreduce", "--nodes", "2", "--db", os.path.join(work, "allreduce.db")])
    for name, example, subs in chosen:
        script = os.path.join(work, example)
        text = tb.read_text(os.path.join(tb.REPO, "examples", example))
        for a, b in subs:
            text = text.replace(a, b, 1)
        tb.write_text(script, text)
        shutil.copyfile(os.path.join(work, "allreduce.db"), sysdb)
        os.environ["XDG_DATA_HOME"] = os.path.join(work, "user-" + name)  # an empty user database
        os.makedirs(os.environ["XDG_DATA_HOME"], exist_ok=True)
        os.environ["TULA_REPO"] = tb.REPO
        p.step("%s: the first job (no profile: it measures itself)" % name)
        first = run_job(work, name, "first", ["--tula=auto"], script)
        p.step("%s: the second job, planned from the first" % name)
        planned = run_job(work, name, "planned", ["--tula=auto"], script)
        got = tb.kv(tb.output(["tula", "explain", str(planned["job"]), "--format", "kv"]))
        planned.update(predicted_seconds=tb.number(got.get("predicted_seconds")),
                       recorded_seconds=tb.number(got.get("measured_seconds")),
                       global_batch=tb.number(got.get("global_batch")), epochs=tb.number(got.get("epochs")))
        rows += [first, planned]
        p.step("%s: the first job again without the measurement (--tula=off)" % name)
        rows.append(run_job(work, name, "unmeasured", ["--tula=off", "-N", str(first["nodes"] or 1)], script))
        if planned["global_batch"] and planned["epochs"]:
            env = "ALL,TULA_BATCH_SIZE=%d,TULA_EPOCHS=%d" % (planned["global_batch"], planned["epochs"])
            for i in (1, 2):
                p.step("%s: the planned job's shape again without Tula (%d of 2)" % (name, i))
                r = run_job(work, name, "repeat-%d" % i, ["--tula=off", "-N", str(planned["nodes"] or 1), "--export", env],
                            script)
                r.update(global_batch=planned["global_batch"], epochs=planned["epochs"])
                rows.append(r)
    manifest = dict(study=NAME, examples=[n for n, _, _ in chosen], **tb.provenance())
    tb.write_results(results, rows, manifest)
    p.step("done")


def fmt(x, f="%.1f"):
    return "-" if x is None else f % x


def spread(values):
    """(max - min) / median, percent, of three or more values; None with fewer."""
    v = sorted(x for x in values if x)
    if len(v) < 3:
        return None
    med = (v[(len(v) - 1) // 2] + v[len(v) // 2]) / 2
    return (v[-1] - v[0]) / med * 100


def report(rows, manifest):
    """The report's markdown."""
    out = ["# The first job teaches Tula (isolated testbed)", "",
           "Made by `make first-job-report` (experiments/first_job_report.py) on %s, from an empty database with an"
           % manifest["made_at"][:10],
           "allreduce profile of 2 nodes: the first `sbatch --tula=auto` of each example measures its step and trains",
           "as submitted; the second is planned from it. Error = (measured - predicted) / measured, on the",
           "training seconds of the planned job; noise floor = (max - min) / median of that job's training seconds",
           "and two identical jobs without Tula.", ""]
    for name in dict.fromkeys(r["example"] for r in rows):
        mine = {r["role"]: r for r in rows if r["example"] == name}
        table = [(role, r["job"], r["state"], r["nodes"], fmt(r["wall_seconds"], "%.0f"), fmt(r["train_seconds"]),
                  fmt(r.get("predicted_seconds")), fmt(r["test_accuracy"], "%.4f"), fmt(r["measure_seconds"]))
                 for role, r in mine.items()]
        out += ["## %s" % name, ""]
        out += tb.md_table(("job", "id", "state", "nodes", "wall (s)", "training (s)", "predicted (s)", "test accuracy",
                            "measurement (s)"), "lrlrrrrrr", table, compact=True)
        out.append("")
        first, bare, planned = mine.get("first"), mine.get("unmeasured"), mine.get("planned")
        if first and bare and first["wall_seconds"] is not None and bare["wall_seconds"] is not None:
            budget = min(60.0, 0.02 * (first["time_limit_seconds"] or 0)) if first["time_limit_seconds"] else 60.0
            out.append("Measurement overhead: the first job took %d s of wall time, the same job without the measurement "
                       "%d s: %+d s (the measurement itself: %s s; its budget min(60 s, 2 %% of the time limit) = %.0f s)."
                       % (first["wall_seconds"], bare["wall_seconds"], first["wall_seconds"] - bare["wall_seconds"],
                          fmt(first["measure_seconds"]), budget))
            same = first["test_accuracy"] == bare["test_accuracy"]
            out.append("Test accuracy with the measurement %s, without %s: %s." % (
                fmt(first["test_accuracy"], "%.4f"), fmt(bare["test_accuracy"], "%.4f"),
                "identical" if same else "different (%s)" % ("the same seed: a difference is a bug" if name == "tula-train"
                                                              else "PyTorch's runs differ within the seed spread")))
        if planned and planned.get("predicted_seconds") and planned["train_seconds"]:
            err = (planned["train_seconds"] - planned["predicted_seconds"]) / planned["train_seconds"] * 100
            floor = spread([planned["train_seconds"]] + [mine[k]["train_seconds"] for k in ("repeat-1", "repeat-2") if k in mine])
            out.append("The planned job: %s nodes x global batch %s, %s epochs, predicted %.1f s, measured %.1f s: error %+.1f %%; "
                       "noise floor of the same job three times: %s %%." % (
                           planned["nodes"], planned.get("global_batch"), planned.get("epochs"), planned["predicted_seconds"],
                           planned["train_seconds"], err, fmt(floor)))
        out.append("")
    return "\n".join(out)


def write_report(results, out):
    tb.write_text(out, report(*tb.read_results(results, NAME)))
    print("%s: written to %s" % (NAME, out))


def main(argv=None):
    return tb.one_cluster_main(NAME, "experiments.first_job_report", __doc__, measure, write_report, argv, check=examples)


if __name__ == "__main__":
    sys.exit(main())
