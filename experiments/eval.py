"""The end-to-end evaluation (`make eval`): Tula's choice against two fixed recipes, measured on a
local Slurm cluster of 4 nodes. A row per job in results/eval/runs.jsonl (with manifest.json);
the report is written from them beside the rows (results/eval/report.md and one PNG per model,
experiments/eval_report.py).

  1. starts a local Slurm cluster with 4 nodes (scripts/tula-cluster, TULA_MAX_NODES=4);
  2. profiles allreduce on 2, 3 and 4 nodes and, per model, compute time per iteration on 1 node
     (on a node of the testbed, under its CPU quota) and on 2, 3 and 4 nodes at once (tula
     profile compute --nodes; the same jobs time the whole synchronized step, which sets the
     first run's sync factor) into the cluster's system database;
  3. per model, trains Fashion-MNIST three times, one job after the other, each from the job
     template experiments/eval-job.sbatch (examples/fashion-mnist.sbatch's job with the model,
     epochs, training subset and, for (b) and (c), the global batch and recipe on its tula-train
     line):
       a. sbatch --tula=auto                      (Tula picks nodes, global batch, time limit)
       b. "standard large batch": 4 nodes, the largest global batch tula plan considers feasible
          on 4 nodes, trained with the standard recipe done well (Goyal et al. 2017, "Accurate,
          Large Minibatch SGD"): plain SGD, the rate scaled linearly with the batch, no cap, a
          gradual warmup from the base rate over the first ceil(E/4) epochs, cosine decay, and
          the base rate tuned: one 4-node run per multiplier of EVAL_TUNE_LR (x tula-train's
          default --lr) with --val-split (1/6 of the training images held out), the multiplier
          of the best validation accuracy is (b)'s; the test set plays no part in the choice
       c. small-batch baseline: 1 node, global batch 64
     then (a') the plan again with these runs in the history, submitted and run;
  4. from each job's summary (tula-train --summary): the epochs' test accuracies and times,
     training seconds, final test accuracy, nodes and global batch; Tula's prediction for that
     (nodes, global batch, epochs) from tula predict --format json, made before the job ran;
  5. a simulated comparison on a 512-node GPU cluster when this build's tula plan has
     --hardware FILE (tula plan --format json);
  6. a queue with a hole (experiments/hole.py, when EVAL_MODELS has lenet5): another user's
     reservation takes the cpu nodes from the plan's time_min + 20 s for one minute; the same
     lenet5 job submitted with and without --tula-time-min.
The cluster is torn down on exit, also on Ctrl-C or failure.

Usage: python3 -m experiments.eval [--results DIR] [--from-rows]
--results: the folder of the rows, the report and its PNGs (default $EVAL_OUT, else
results/eval); --from-rows: no cluster, the report written from the rows.
Environment:
  EVAL_MODELS       models to evaluate (default "lenet5"; e.g. "lenet5 fmnist-cnn")
  EVAL_EPOCHS       epochs per run (default 4; the example script trains 12)
  EVAL_LIMIT_TRAIN  training images per epoch, tula-train --limit-train (default 0 = all 60,000)
  EVAL_TARGET       test accuracy for "time to target" (default: per model, the final test accuracy
                    of run (c) minus 1 point: the accuracy target Tula plans the epochs for, within
                    tula.conf's default max_accuracy_loss)
  EVAL_OUT          the default of --results
  EVAL_HARDWARE     cluster description for the simulation (default etc/hardware-h100-512.json)
  EVAL_KEEP=1       keep the cluster's temporary directory (job outputs, databases)
  EVAL_TUNE_LR      multipliers of the base rate tried for run (b) (default "1 0.5 0.25")
  TULA_BUILD_DIR    the build whose bin/ has tula and tula-train (default build)"""
import argparse
import os
import re
import shutil
import sys

from experiments import eval_report
from experiments import hole
from experiments import testbed as tb

NAME = eval_report.NAME
TEMPLATE = os.path.join(tb.REPO, "experiments", "eval-job.sbatch")
FULL_TRAIN = 60000          # Fashion-MNIST's training images
WAIT_S = 4 * 3600           # the longest wait for one job
BASE_LR = 0.05              # tula-train's default --lr where its --help does not say
HOLE_EPOCHS, HOLE_BATCH = 30, 64
HOLE_ARGS = ("--model lenet5 --data fashion-mnist --epochs %d --limit-train 12800 --limit-test 512 --batch-size %d"
             " --threads 1 --seed 7" % (HOLE_EPOCHS, HOLE_BATCH))


# ---- settings ---------------------------------------------------------------------------------

def build_dir(env):
    d = env.get("TULA_BUILD_DIR") or os.path.join(tb.REPO, "build")
    return d if os.path.isabs(d) else os.path.join(tb.REPO, d)


def whole(var, text):
    if not re.fullmatch(r"[0-9]+", text):
        tb.die(NAME, "%s must be a whole number, not '%s'" % (var, text), 2)
    return int(text)


def settings(env=None):
    """The evaluation's settings from the environment. A wrong one ends the program with exit
    status 2 and one `tula: eval:` line naming it; missing binaries or gnuplot with status 1."""
    env = os.environ if env is None else env
    models = (env.get("EVAL_MODELS") or "lenet5").split()
    if not models:
        tb.die(NAME, 'EVAL_MODELS is empty; give model names, e.g. "lenet5 fmnist-cnn"', 2)
    bdir = build_dir(env)
    trainer = os.path.join(bdir, "bin", "tula-train")
    if not (os.access(trainer, os.X_OK) and os.access(os.path.join(bdir, "bin", "tula"), os.X_OK)):
        tb.die(NAME, "no tula and tula-train in %s/bin; build them first (make, or make eval)" % bdir)
    listing = tb.stdout_of([trainer, "--list-models", "--data", "fashion-mnist"]).splitlines()[1:]
    known = [line.split()[0] for line in listing if line.split()]
    for m in models:
        if m not in known:
            tb.die(NAME, "'%s' in EVAL_MODELS is not a model of tula-train (it has: %s)" % (m, " ".join(known)), 2)
    epochs = whole("EVAL_EPOCHS", env.get("EVAL_EPOCHS") or "4")
    limit = whole("EVAL_LIMIT_TRAIN", env.get("EVAL_LIMIT_TRAIN") or "0")
    if epochs < 1:
        tb.die(NAME, "EVAL_EPOCHS must be at least 1", 2)
    tune = (env.get("EVAL_TUNE_LR") or "1 0.5 0.25").split()
    for x in tune:
        if not (re.fullmatch(r"[0-9]*\.?[0-9]+", x) and 0 < float(x) <= 16):
            tb.die(NAME, "EVAL_TUNE_LR must list rate multipliers in (0, 16], e.g. \"1 0.5 0.25\", not '%s'" % x, 2)
    if not tune:
        tb.die(NAME, 'EVAL_TUNE_LR is empty; give rate multipliers, e.g. "1 0.5 0.25"', 2)
    target = env.get("EVAL_TARGET") or None
    if target is not None and not (re.fullmatch(r"0?\.[0-9]+", target) and 0 < float(target) < 1):
        tb.die(NAME, "EVAL_TARGET must be a test accuracy between 0 and 1 (e.g. 0.85), not '%s'" % target, 2)
    if not shutil.which("gnuplot"):
        tb.die(NAME, "gnuplot is not installed (Debian: gnuplot-nox)")
    return {"models": models, "epochs": epochs, "limit_train": limit, "target": target, "tune_lr": tune,
            "hardware": env.get("EVAL_HARDWARE") or os.path.join(tb.REPO, "etc", "hardware-h100-512.json"),
            "keep": env.get("EVAL_KEEP") == "1", "eval_out": env.get("EVAL_OUT") or None}


# ---- the batch scripts ------------------------------------------------------------------------

def trainer_args(model, epochs, limit, batch=None, more=()):
    """tula-train's arguments of a job: the model, epochs and subset; with batch, that global batch
    with linear scaling and the more arguments ((b) and (c): plain SGD), else --optimizer auto (the
    example's: SGD for small global batches, AGS for large ones)."""
    a = ["--model", model, "--data", "fashion-mnist", "--epochs", str(epochs)]
    if limit > 0:
        a += ["--limit-train", str(limit)]
    if batch:
        a += ["--batch-size", str(batch), "--lr-scaling", "linear"] + list(more)
    else:
        a += ["--optimizer", "auto"]
    return " ".join(a)


_FIELD = re.compile(r"@[A-Z_]+@")


def fill_template(template, job_name, output, args, summary):
    """The template with its @JOB_NAME@, @OUTPUT@, @TRAINER_ARGS@ and @SUMMARY@ filled."""
    values = {"@JOB_NAME@": job_name, "@OUTPUT@": output, "@TRAINER_ARGS@": args, "@SUMMARY@": summary}
    return _FIELD.sub(lambda m: values.get(m.group(0), m.group(0)), template)


def script_problem(text, job_name, output, args, summary):
    """What is wrong with a filled batch script, or None: a field left unfilled, or its job name,
    output or tula-train line not the ones asked for."""
    left = _FIELD.findall(text)
    if left:
        return "fields left unfilled: %s" % " ".join(left)
    lines = text.splitlines()
    for want in ("#SBATCH --job-name=" + job_name, "#SBATCH --output=" + output):
        if want not in lines:
            return "no line '%s'" % want
    found = trainer_line(text)
    if found != (args, summary):
        return "its tula-train line has %r, not %r" % (found, (args, summary))
    return None


_TRAINER = re.compile(r'^\s*tula-train (.*) --summary "([^"]*)"\s*$', re.M)


def trainer_line(text):
    """(tula-train's arguments, its --summary path) on a batch script's tula-train line, or None."""
    found = _TRAINER.findall(text)
    return tuple(found[-1]) if len(found) == 1 else None


def base_lr(help_text):
    """tula-train's default --lr, from its --help text (BASE_LR where it is not there)."""
    m = re.search(r"^ *--lr FLOAT=([0-9.eE+-]+) ", help_text, re.M)
    return float(m.group(1)) if m else BASE_LR


def largest_batch(plan, nodes):
    """The largest global batch of the plan's candidates on that many nodes, or None."""
    return max((c["global_batch"] for c in plan.get("candidates", []) if c.get("nodes") == nodes), default=None)


def chosen(plan):
    """The plan's chosen candidate."""
    return plan["candidates"][plan["chosen"]]


def planned(plan):
    """((nodes, ranks per node, global batch, epochs), partition or None) of the plan's choice."""
    c = chosen(plan)
    return (c["nodes"], c.get("ranks_per_node") or 1, c["global_batch"], c["epochs"]), c.get("partition") or None


def plan_digest(plan):
    """What the report shows of a `tula plan --format json` document."""
    c = chosen(plan)
    return {"nodes": c["nodes"], "ranks_per_node": c.get("ranks_per_node"), "global_batch": c["global_batch"],
            "epochs": c["epochs"], "partition": c.get("partition"), "noise_scale": plan.get("noise_scale"),
            "noise_scale_source": plan.get("noise_scale_source"),
            "accuracy_excluded": plan.get("accuracy_excluded"), "reason": plan.get("reason"),
            "price_per_node_hour": plan.get("price_per_node_hour"), "node_hour_price": plan.get("node_hour_price")}


def simulated_runs(plan):
    """The three configurations of the local runs in a simulated plan: Tula's choice, the most
    nodes at their largest batch, one node at its smallest batch."""
    cands = plan.get("candidates", [])
    out = [dict(run="(a) Tula", **pick(chosen(plan)))]
    kmax = max((c["nodes"] for c in cands), default=None)
    big = [c for c in cands if c["nodes"] == kmax]
    if big:
        out.append(dict(run="(b) %d nodes, largest batch" % kmax, **pick(max(big, key=lambda c: c["global_batch"]))))
    one = [c for c in cands if c["nodes"] == 1]
    if one:
        out.append(dict(run="(c) 1 node, smallest batch", **pick(min(one, key=lambda c: c["global_batch"]))))
    return out


def pick(c):
    return {k: c[k] for k in ("nodes", "global_batch", "total_seconds", "node_hours")}


# ---- inside the cluster -----------------------------------------------------------------------

class Evaluation:
    """The measurements inside the cluster: rows of jobs, the manifest's per-model notes and the
    commands that ran."""

    def __init__(self, s, cluster_dir):
        self.s = s
        self.work = os.path.join(cluster_dir, "eval")
        os.makedirs(self.work, exist_ok=True)
        self.sysdb = os.path.join(cluster_dir, "system.db")
        self.p = tb.Progress(NAME)
        self.rows, self.commands, self.per_model = [], [], {}
        self.template = tb.read_text(TEMPLATE)
        self.commit = tb.provenance()["git_commit"]
        self.trainer_sha = tb.file_sha256(shutil.which("tula-train"))
        limit = s["limit_train"]
        self.train_images = limit if 0 < limit < FULL_TRAIN else FULL_TRAIN
        self.isolated = os.environ.get("TULA_TESTBED") == "isolated"

    def on_node(self, args):
        """args run on a node of the isolated testbed (under its CPU quota, like the jobs), else here."""
        return (tb.ON_NODE if self.isolated else []) + args

    def script(self, m, label, batch=None, more=()):
        """The batch script of one job, written to work/MODEL-LABEL.sbatch and checked: (path, its
        tula-train arguments)."""
        args = trainer_args(m, self.s["epochs"], self.s["limit_train"], batch, more)
        base = os.path.join(self.work, "%s-%s" % (m, label))
        fields = ("eval-%s-%s" % (m, label), base + "-%j.out", args, base + "-$SLURM_JOB_ID.summary.jsonl")
        tb.write_text(base + ".sbatch", fill_template(self.template, *fields))
        why = script_problem(tb.read_text(base + ".sbatch"), *fields)
        if why:
            tb.die(NAME, "the batch script %s.sbatch is not as meant: %s" % (base, why))
        return base + ".sbatch", args

    def predict(self, m, label, shape, partition=None):
        """tula predict --format json of shape (nodes, ranks per node, global batch, epochs) on
        the partition (None: tula predict's default), before the job runs; the document, or None
        where it failed."""
        path = os.path.join(self.work, "%s-%s-predict.json" % (m, label))
        k, r, b, e = shape
        rc = tb.run(["tula", "predict", "--workload", m + "@fashion-mnist", "--nodes", str(k), "--ranks-per-node", str(r),
                     "--global-batch", str(b), "--epochs", str(e), "--limit-train", str(self.train_images)]
                    + (["--partition", partition] if partition else []) + ["--format", "json"],
                    out=path, check=False, quiet=True)
        return tb.read_json(path) if rc == 0 else None

    def job(self, m, arm, options, script, args, what, shape=None, predicted=None):
        """Submits script with sbatch options, waits for it; its row (appended to the rows), or
        None where it left no summary. predicted: Tula's seconds for shape (nodes, ranks per node,
        global batch, epochs), kept when the job ran that shape."""
        job = tb.submit(list(options) + ["--parsable", script])
        self.commands.append("%s   # job %s" % (what, job))
        f = hole.job_fields(job)
        print("NumNodes=%s TimeLimit=%s" % (f.get("NumNodes"), f.get("TimeLimit")), flush=True)
        try:
            end = hole.wait_all([job], WAIT_S, self.p.say)[job]
        except hole.ScenarioError as e:
            tb.die(NAME, str(e))
        base = script[:-len(".sbatch")]
        out = tb.read_text("%s-%s.out" % (base, job))
        for line in out.splitlines():
            if line.startswith("epoch") or line.startswith("tula-train: done"):
                print(line)
        run = tb.run_summary("%s-%s.summary.jsonl" % (base, job))
        if run is None:
            tb.warn(NAME, "job %s (%s, %s) did not finish training (state %s); the end of its output:\n%s"
                    % (job, m, arm, end.get("JobState", "unknown"), "\n".join(out.splitlines()[-20:])))
            return None
        h, sm = run["run"], run["summary"]
        rpn = h["ranks"] // max(1, h["nodes"])
        ran = (h["nodes"], rpn, h["global_batch"], h["epochs"])
        row = {"study": NAME, "model": m, "arm": arm, "job": int(job), "nodes": h["nodes"],
               "ranks_per_node": rpn, "global_batch": h["global_batch"], "epochs": h["epochs"],
               "optimizer": h.get("optimizer"), "predicted_seconds": predicted if shape is not None and tuple(shape) == ran else None,
               "measured_seconds": sm["train_seconds"], "test_accuracy": sm["test_accuracy"],
               "val_accuracy": sm.get("val_accuracy"), "curve": [[e["seconds"], e["test_accuracy"]] for e in run["epochs"]],
               "wall_seconds": hole.slurm_seconds(end.get("RunTime")), "state": end.get("JobState"), "host": h.get("host"),
               "git_commit": self.commit, "binary_sha256": self.trainer_sha,
               "command": "sbatch %s %s" % (" ".join(options), os.path.basename(script)), "trainer_args": args}
        self.rows.append(row)
        return row

    def profile(self, m):
        """The compute profile of the model; the spread of its one-node rounds (percent), or None."""
        workload, iters = m + "@fashion-mnist", 10 if m == "lenet5" else 4
        self.p.step("profiling %s: compute time per iteration on 1 node, then on 2, 3 and 4 nodes at once" % workload)
        log = os.path.join(self.work, m + "-profile.log")
        tb.tee(self.on_node(["tula", "profile", "compute", "--workload", workload, "--iters", str(iters),
                             "--nodes", "2,3,4", "--db", self.sysdb]), log)
        self.commands.append("tula profile compute --workload %s --iters %d --nodes 2,3,4 --db $CLUSTER/system.db"
                             % (workload, iters))
        return tb.round_spread(tb.read_text(log))

    def plan(self, m, script, path):
        """`tula plan --script` shown, and its JSON document (None where it failed), which must
        have read the model and epochs of the script."""
        tb.run(["tula", "plan", "--script", script], check=False)
        if tb.run(["tula", "plan", "--script", script, "--format", "json"], out=path, check=False) != 0:
            return None
        doc = tb.read_json(path)
        if doc and (doc.get("workload"), doc.get("epochs")) != (m + "@fashion-mnist", self.s["epochs"]):
            tb.die(NAME, "tula plan read %s, %s epochs from %s, not %s@fashion-mnist, %d epochs"
                   % (doc.get("workload"), doc.get("epochs"), script, m, self.s["epochs"]))
        return doc

    def tune(self, m, big, base):
        """Run (b)'s base rate (a multiple of base) tuned on a validation split: (the chosen
        multiplier's row, the recipe)."""
        epochs, limit = self.s["epochs"], self.s["limit_train"]
        val = (limit if limit > 0 else FULL_TRAIN) // 6
        recipe = ["--optimizer", "sgd", "--lr-max", "0", "--warmup-epochs", str((epochs + 3) // 4), "--schedule", "cosine"]
        for mult in self.s["tune_lr"]:
            lr = "%.6g" % (base * float(mult))
            more = recipe + ["--lr", lr, "--val-split", str(val)]
            script, args = self.script(m, "tune" + mult, big, more)
            self.p.step("tuning run (b) of %s@fashion-mnist: 4 nodes x %d, base rate %s (%s x %g), %d images held out"
                        % (m, big, lr, mult, base, val))
            row = self.job(m, "tune", ["--tula=off", "-N", "4", "-t", "60"], script, args,
                           "sbatch --tula=off -N 4 %s-tune%s.sbatch (--batch-size %d %s)" % (m, mult, big, " ".join(more)))
            if row is None:
                self.rows.append({"study": NAME, "model": m, "arm": "tune", "global_batch": big, "nodes": 4,
                                  "epochs": epochs, "command": "sbatch --tula=off -N 4 -t 60 " + os.path.basename(script),
                                  "trainer_args": args, "git_commit": self.commit, "binary_sha256": self.trainer_sha})
                row = self.rows[-1]
            row.update(lr_mult=float(mult), lr=float(lr))
        best = eval_report.best_tune(self.rows, m)
        if best is None:
            tb.die(NAME, "no tuning run of (b) for %s finished; see %s" % (m, self.work))
        return best, recipe

    def model(self, m):
        """The profile, plans and jobs of one model."""
        note = {"profile_noise_percent": self.profile(m)}
        auto, auto_args = self.script(m, "auto")
        self.p.step("the plan for %s@fashion-mnist (%d epochs)" % (m, self.s["epochs"]))
        plan = self.plan(m, auto, os.path.join(self.work, m + "-plan.json"))
        if plan is None:
            tb.die(NAME, "tula plan failed for %s" % auto)
        big = largest_batch(plan, 4)
        if big is None:
            tb.die(NAME, "tula plan has no 4-node candidate for %s@fashion-mnist (allreduce profile missing?)" % m)
        base = base_lr(tb.stdout_of(["tula-train", "--help"]))
        note.update(big_batch=big, plan_before=plan_digest(plan), base_lr=base)
        best, recipe = self.tune(m, big, base)
        large = self.script(m, "large", big, recipe + ["--lr", "%.6g" % best["lr"]])
        small = self.script(m, "small", 64)
        e = self.s["epochs"]
        arms = (("tula", ["--tula=auto"], (auto, auto_args), "sbatch --tula=auto %s-auto.sbatch" % m),
                ("large", ["--tula=off", "-N", "4", "-t", "60"], large,
                 "sbatch --tula=off -N 4 %s-large.sbatch (--batch-size %d)" % (m, big)),
                ("small", ["--tula=off", "-N", "1", "-t", "60"], small, "sbatch --tula=off -N 1 %s-small.sbatch (--batch-size 64)" % m))
        for arm, options, (script, args), what in arms:
            if arm == "tula":
                self.run_arm(m, arm, options, script, args, what, *planned(plan))
            else:
                self.run_arm(m, arm, options, script, args, what, (4, 1, big, e) if arm == "large" else (1, 1, 64, e))
        # The online part: the same plan again, now with the run history of these three jobs, as the
        # next submission gets it, and that submission run.
        self.p.step("the plan for %s@fashion-mnist again, with the run history of the three jobs" % m)
        after = self.plan(m, auto, os.path.join(self.work, m + "-plan-after.json"))
        note["plan_after"] = plan_digest(after) if after else None
        if after is None:
            tb.warn(NAME, "tula plan failed after the three runs; run (a') is not made")
        else:
            self.commands.append("tula plan --script %s-auto.sbatch   # again, after the three jobs" % m)
            self.run_arm(m, "tula-again", ["--tula=auto"], auto, auto_args,
                         "sbatch --tula=auto %s-auto.sbatch (again, after the three runs)" % m, *planned(after))
        self.per_model[m] = note

    def run_arm(self, m, arm, options, script, args, what, shape, partition=None):
        """One of the compared jobs: predicted, run, and required to finish."""
        doc = self.predict(m, arm, shape, partition)
        self.p.step("run %s of %s@fashion-mnist: %s" % (arm, m, what))
        if self.job(m, arm, options, script, args, what, shape, tb.predicted_seconds(doc)) is None:
            tb.die(NAME, "job of run %s of %s did not finish training" % (arm, m))

    def simulate(self):
        """The simulated comparison on a 512-node GPU cluster, for the manifest."""
        self.p.step("simulation: 512-node GPU cluster")
        hw = self.s["hardware"]
        if "--hardware" not in tb.stdout_of(["tula", "plan", "--help"]):
            return {"status": "unavailable"}
        if not os.path.isfile(hw):
            return {"status": "no-file", "hardware_file": hw}
        path = os.path.join(self.work, "sim.json")
        rc = tb.run(["tula", "plan", "--max-nodes", "512", "--hardware", hw, "--format", "json"], out=path, check=False)
        doc = tb.read_json(path) if rc == 0 else None
        if not doc:
            return {"status": "failed", "hardware_file": hw}
        return {"status": "ok", "hardware_file": hw, "workload": doc.get("workload"), "epochs": doc.get("epochs"),
                "hardware": doc.get("hardware"), "runs": simulated_runs(doc)}

    def queue_hole(self):
        """The hole scenario (experiments/hole.py) when lenet5 is evaluated: its two jobs' rows are
        appended; its setting, for the manifest."""
        self.p.step("a queue with a hole: the same lenet5 job with and without --tula-time-min")
        if "lenet5" not in self.s["models"]:
            return {"status": "not-run"}
        path = os.path.join(self.work, "hole.json")
        try:
            rc = hole.main(["--workdir", os.path.join(self.work, "hole"), "--hold", "1", "--out", path,
                            "--trainer-args", HOLE_ARGS])
        except Exception as e:  # the section reports the failure; the evaluation goes on
            tb.warn(NAME, "experiments.hole: %s" % e)
            rc = 1
        r = tb.read_json(path) if rc == 0 else None
        if not r:
            return {"status": "failed"}
        for variant, arm, opt in (("time_min", "hole-with", "yes"), ("no_time_min", "hole-without", "no")):
            v = r[variant]
            self.rows.append({"study": NAME, "model": "lenet5", "arm": arm, "job": v["job"], "nodes": 1, "ranks_per_node": 1,
                              "global_batch": HOLE_BATCH, "epochs": HOLE_EPOCHS, "predicted_seconds": None,
                              "measured_seconds": v["time_to_result_seconds"], "test_accuracy": v["test_accuracy"],
                              "first_start_seconds": v["first_start_seconds"], "parts": v["parts"], "state": v["state"],
                              "host": v.get("host"), "git_commit": self.commit, "binary_sha256": self.trainer_sha,
                              "command": "sbatch --tula=auto --tula-time-min=%s hole.sbatch" % opt, "trainer_args": HOLE_ARGS})
        return dict({k: r[k] for k in eval_report.HOLE_SETTING}, status="ok")


def measure(results):
    """Inside the cluster: every measurement; writes the results folder."""
    s = settings()
    d = os.environ.get("TULA_CLUSTER_DIR")
    if not d:
        tb.die(NAME, "run through scripts/tula-cluster (or make eval)")
    os.chdir(d)
    ev = Evaluation(s, d)
    ev.p.step("profiling allreduce on 2, 3 and 4 nodes")
    tb.run(["tula", "profile", "allreduce", "--nodes", "2,3,4", "--db", ev.sysdb])
    ev.commands.append("tula profile allreduce --nodes 2,3,4 --db $CLUSTER/system.db")
    for m in s["models"]:
        ev.model(m)
    simulation = ev.simulate()
    queue = ev.queue_hole()
    cpu = re.search(r"^model name\s*: (.*)$", tb.read_text("/proc/cpuinfo"), re.M)
    manifest = dict(study=NAME, models=s["models"], epochs=s["epochs"], limit_train=s["limit_train"],
                    train_images=ev.train_images, target=s["target"], tune_lr=s["tune_lr"], eval_out=s["eval_out"],
                    testbed=os.environ.get("TULA_TESTBED") or None, link_rate=os.environ.get("TULA_LINK_RATE") or "200mbit",
                    cpu=cpu.group(1) if cpu else None, load_average=" ".join(tb.read_text("/proc/loadavg").split()[:3]),
                    seconds=ev.p.seconds(), per_model=ev.per_model, simulation=simulation, hole=queue,
                    commands=ev.commands, tula_sha256=tb.file_sha256(shutil.which("tula")),
                    trainer_sha256=ev.trainer_sha, **tb.provenance())
    tb.write_results(results, ev.rows, manifest)
    ev.p.step("rows written to %s" % results)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m experiments.eval", description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", help="the folder of the rows, the report and its PNGs (default $EVAL_OUT, else results/eval)")
    ap.add_argument("--from-rows", action="store_true", help="no cluster: the report written from the rows")
    ap.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    results = os.path.abspath(a.results or os.environ.get("EVAL_OUT") or os.path.join(tb.REPO, "results", NAME))
    if a.inside:
        return tb.inside(NAME, measure, results)
    if not a.from_rows:
        s = settings()
        rc = tb.cluster_run("experiments.eval", ["--inside", "--results", results],
                            dict(os.environ, TULA_MAX_NODES="4"), keep=s["keep"])
        if rc != 0:
            return rc
    eval_report.write(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
