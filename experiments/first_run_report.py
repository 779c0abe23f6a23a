"""How right Tula's first prediction is (no run history), repeated (`make first-run-report`).

On one isolated testbed: allreduce is profiled once on 2-4 nodes. Then per model, FIRST_RUNS
times: the model's compute profile is measured afresh (on a node under its CPU quota, and on
2-4 nodes at once, as make eval does) into an otherwise empty system database, the user's
database is a new empty one, and `sbatch --tula=auto` submits examples/fashion-mnist.sbatch
with the model, epochs and training subset set; `tula explain` gives the job's prediction
error (measured - predicted) / measured. Anchor, per model: the last planned job submitted
again unchanged with --tula=off (same nodes, global batch, epochs), whose spread from the
planned one is the run-to-run noise no prediction can beat. A row per job
(results/first-run-report/runs.jsonl, with manifest.json); the report is written from them.

Usage: python3 -m experiments.first_run_report [--results DIR] [--out FILE] [--from-rows]
--results: the rows' folder (default results/first-run-report); --out: the report (default
report.md in the rows' folder); --from-rows: no
cluster, the report written from the rows.
Environment: FIRST_RUNS (default 5; FIRST_RUNS_<model>, e.g. FIRST_RUNS_fmnist_cnn, for one
model), FIRST_MODELS (default "lenet5 fmnist-cnn"), FIRST_EPOCHS_<model> and FIRST_LIMIT_<model>
(defaults: lenet5 2 epochs of all 60,000 images; fmnist-cnn 2 epochs of 6,400)."""
import os
import re
import shutil
import sys
import time

from experiments import testbed as tb

NAME = "first-run-report"


def count(var, default):
    """The run count of environment variable var (default when unset): 1 to 99, else exit 2."""
    v = os.environ.get(var, default)
    if not re.fullmatch(r"[1-9][0-9]?", v):
        tb.die(NAME, "%s='%s' is not a count from 1 to 99" % (var, v), 2)
    return int(v)


def settings():
    """The runs, the models and each model's (epochs, training subset, profile iterations, runs)."""
    runs = count("FIRST_RUNS", "5")
    models = os.environ.get("FIRST_MODELS", "lenet5 fmnist-cnn").split()
    per = {}
    for m in models:
        v = m.replace("-", "_")
        epochs = os.environ.get("FIRST_EPOCHS_" + v) or "2"
        limit = os.environ.get("FIRST_LIMIT_" + v) or ("60000" if m == "lenet5" else "6400")
        per[m] = (epochs, limit, 10 if m == "lenet5" else 4, count("FIRST_RUNS_" + v, str(runs)))
    return models, per


def sub_first(pattern, repl, text):
    """sed's s/pattern/repl/ on every line of text (the first match of each line)."""
    return "".join(re.sub(pattern, lambda _: repl, line, count=1) for line in text.splitlines(True))


def wait_for(job, out):
    """Waits for the job; true when tula-train finished training."""
    while tb.stdout_of(["squeue", "-h", "-j", job]).strip():
        time.sleep(2)
    return re.search(r"^tula-train: done:", tb.read_text(out), re.M) is not None


def measure(results):
    """Inside the cluster: the runs; writes the results folder."""
    models, per = settings()
    sysdb = os.path.join(tb.in_cluster(NAME), "system.db")
    work = os.path.join(os.getcwd(), "first-run")
    os.makedirs(work, exist_ok=True)
    p = tb.Progress(NAME)
    manifest = dict(study=NAME, models={m: {"epochs": int(per[m][0]), "limit_train": int(per[m][1]), "iters": per[m][2],
                                            "runs": per[m][3]} for m in models}, **tb.provenance())
    rows = []
    p.step("allreduce profile on 2, 3 and 4 nodes (shared by every run below)")
    tb.run(["tula", "profile", "allreduce", "--nodes", "2,3,4", "--db", os.path.join(work, "allreduce.db")])
    with open(os.path.join(tb.REPO, "examples", "fashion-mnist.sbatch")) as f:
        example = f.read()
    for m in models:
        epochs, limit, iters, n_runs = per[m]
        script = os.path.join(work, m + ".sbatch")
        text = sub_first(r"--model lenet5", "--model " + m, example)
        text = sub_first(r"--epochs 12", "--epochs %s --limit-train %s --limit-test 2000" % (epochs, limit), text)
        text = sub_first(r"^#SBATCH --job-name=.*", "#SBATCH --job-name=first-" + m, text)
        tb.write_text(script, text)
        for i in range(1, n_runs + 1):
            p.step("%s, first run %d of %d: a fresh compute profile, an empty run history" % (m, i, n_runs))
            shutil.copyfile(os.path.join(work, "allreduce.db"), sysdb)
            os.environ["XDG_DATA_HOME"] = os.path.join(work, "user-%s-%d" % (m, i))
            os.makedirs(os.environ["XDG_DATA_HOME"], exist_ok=True)
            tb.on_node(["tula", "profile", "compute", "--workload", m + "@fashion-mnist", "--iters", str(iters),
                        "--nodes", "2,3,4", "--db", sysdb], out=os.path.join(work, "profile-%s-%d.log" % (m, i)))
            job = tb.submit(["--tula=auto", "--parsable", "-o", os.path.join(work, "%s-%d-%%j.out" % (m, i)), script])
            out = os.path.join(work, "%s-%d-%s.out" % (m, i, job))
            if not wait_for(job, out):
                tb.warn(NAME, "job %s did not finish (see %s)" % (job, out))
                continue
            got = tb.kv(tb.output(["tula", "explain", job, "--format", "kv"]))
            row = {"study": NAME, "model": m, "run": i, "job": tb.number(job), "nodes": tb.number(got.get("nodes")),
                   "global_batch": tb.number(got.get("global_batch")), "epochs": tb.number(got.get("epochs")),
                   "predicted_seconds": tb.number(got.get("predicted_seconds")),
                   "measured_seconds": tb.number(got.get("measured_seconds"))}
            print("\t".join(str(row[k]) for k in ("model", "run", "job", "nodes", "global_batch", "epochs",
                                                   "predicted_seconds", "measured_seconds")), flush=True)
            rows.append(row)
        # The anchor: the last planned job again, without Tula, same shape.
        last = [r for r in rows if r["model"] == m]
        if not last:
            continue
        last = last[-1]
        anchor = os.path.join(work, m + "-anchor.sbatch")
        text = sub_first(r"--optimizer auto", "--optimizer auto --batch-size %s" % last["global_batch"], text)
        text = sub_first(re.escape("--epochs %s " % epochs), "--epochs %s " % last["epochs"], text)
        tb.write_text(anchor, text)
        job = tb.submit(["--tula=off", "-N", str(last["nodes"]), "-t", "30", "--parsable",
                      "-o", os.path.join(work, "%s-anchor-%%j.out" % m), anchor])
        out = os.path.join(work, "%s-anchor-%s.out" % (m, job))
        if wait_for(job, out):
            row = {"study": NAME, "model": m, "run": "anchor", "job": tb.number(job), "nodes": last["nodes"],
                   "global_batch": last["global_batch"], "epochs": last["epochs"],
                   "planned_seconds": last["measured_seconds"], "measured_seconds": tb.done_train_seconds(tb.read_text(out))}
            print("\t".join(str(row[k]) for k in ("model", "run", "job", "nodes", "global_batch", "epochs",
                                                   "planned_seconds", "measured_seconds")), flush=True)
            rows.append(row)
    tb.write_results(results, rows, manifest)
    p.step("done")


def fmt(x):
    return "-" if x is None else "%.1f" % x


def report(rows, manifest):
    """The report's markdown."""
    out = ["# First-run prediction error, repeated (isolated testbed)", "",
           "Made by `make first-run-report` (experiments/first_run_report.py) on %s. Each run: a fresh compute" % manifest["made_at"][:10],
           "profile (1 node under its CPU quota, 2-4 nodes at once), an empty run history, then",
           "`sbatch --tula=auto examples/fashion-mnist.sbatch` (model, epochs and training subset set);",
           "error = (measured - predicted) / measured. Target: within 5 % in at least 4 of 5 runs.", ""]
    shape = ("nodes", "global_batch", "epochs")
    for m in dict.fromkeys(r["model"] for r in rows):
        mine = [r for r in rows if r["model"] == m and r["run"] != "anchor"]
        out += ["## %s" % m, ""]
        table, within = [], 0
        for r in mine:
            p, q = r["predicted_seconds"], r["measured_seconds"]
            if p is None or not q:  # no prediction or no measurement: no error
                table.append((r["run"], r["job"], r["nodes"], r["global_batch"], r["epochs"], fmt(p), fmt(q), "-"))
                continue
            e = (q - p) / q * 100
            within += abs(e) <= 5
            table.append((r["run"], r["job"], r["nodes"], r["global_batch"], r["epochs"], "%.1f" % p, "%.1f" % q, "%+.1f" % e))
        out += tb.md_table(("run", "job", "nodes", "global batch", "epochs", "predicted (s)", "measured (s)", "error (%)"),
                           "rrrrrrrr", table, compact=True)
        out += ["", "Within 5 %%: **%d of %d** runs (target: at least 4 of 5)." % (within, len(mine))]
        for r in rows:
            if r["model"] != m or r["run"] != "anchor" or not r["measured_seconds"] or not r["planned_seconds"]:
                continue
            a, b = r["planned_seconds"], r["measured_seconds"]
            out.append("Anchor: the last planned job (%s nodes x %s, %s epochs) again without Tula, job %s: "
                       "%.1f s against %.1f s, a spread of %.1f %% between identical jobs."
                       % (r["nodes"], r["global_batch"], r["epochs"], r["job"], b, a, abs(a - b) / ((a + b) / 2) * 100))
            # every job of the anchor's shape did the same work (same seed, data and epochs): the
            # spread of their times is the noise no prediction can beat, and a constant prediction
            # at their median is the best one fixed in advance could do
            planned = [x["measured_seconds"] for x in mine if [x[k] for k in shape] == [r[k] for k in shape] and x["measured_seconds"]]
            same = planned + [b]
            if len(same) >= 3:
                srt = sorted(same)
                med = (srt[(len(srt) - 1) // 2] + srt[len(srt) // 2]) / 2
                ok = sum(abs(t - med) / t * 100 <= 5 for t in planned)
                out.append("The %d jobs of that shape (the anchor included) did the same work: %.1f to %.1f s, median %.1f s,"
                           " a spread (max - min) / median of %.1f %%. A prediction of that median for every run would be"
                           " within 5 %% in %d of its %d runs." % (len(same), srt[0], srt[-1], med,
                                                                   (srt[-1] - srt[0]) / med * 100, ok, len(planned)))
        out.append("")
    return "\n".join(out)


def write_report(results, out):
    tb.write_text(out, report(*tb.read_results(results, NAME)))
    print("%s: written to %s" % (NAME, out))


def main(argv=None):
    return tb.one_cluster_main(NAME, "experiments.first_run_report", __doc__, measure, write_report, argv, check=settings)


if __name__ == "__main__":
    sys.exit(main())
