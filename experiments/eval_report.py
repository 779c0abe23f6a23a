"""The end-to-end evaluation's report (experiments/eval.py), written from its rows alone:
results/eval/runs.jsonl (a row per job, its field arm says which: tune, tula, large, small,
tula-again, hole-with, hole-without) and manifest.json (the settings, each model's plans and
profile noise, the simulation, the hole scenario's setting and the commands that ran). It writes
report.md and one PNG per model (gnuplot) beside the rows.

A row of a training job has model, arm, job, nodes, ranks_per_node, global_batch, epochs,
optimizer, predicted_seconds (tula predict's, null where the job did not run the predicted
shape), measured_seconds (training seconds, the sum of the epochs'), test_accuracy,
val_accuracy, curve ([seconds, test accuracy] of each epoch), wall_seconds, state, host,
git_commit, binary_sha256 (of tula-train), command and trainer_args; a tuning row adds lr_mult
and lr. A hole row's measured_seconds is the time to result (submission to the last part's end),
with first_start_seconds and parts."""
import os
import shutil
import subprocess
import tempfile

from experiments import hole
from experiments import testbed as tb

NAME = "eval"
ARMS = (("tula", "(a) Tula auto"), ("large", "(b) large batch"), ("small", "(c) small batch"),
        ("tula-again", "(a') Tula auto again"))
HOLE_SETTING = ("plan", "time_min_minutes", "hole_seconds", "reservation_minutes", "partition", "trainer_args")
FULL_TRAIN = 60000


# ---- figures from the rows --------------------------------------------------------------------

def best_tune(rows, model):
    """The tuning row of the model with the best validation accuracy (the first of equals), or None."""
    best = None
    for r in rows:
        if r.get("model") == model and r.get("arm") == "tune" and r.get("val_accuracy") is not None:
            if best is None or r["val_accuracy"] > best["val_accuracy"]:
                best = r
    return best


def arm_row(rows, model, arm):
    """The model's last row of that arm, or None."""
    found = [r for r in rows if r.get("model") == model and r.get("arm") == arm]
    return found[-1] if found else None


def target_text(rows, manifest, model):
    """The model's accuracy target as printed: EVAL_TARGET, else run (c)'s final test accuracy
    minus 1 point (at least 0.0001), to 4 decimals; None without run (c)."""
    if manifest.get("target"):
        return manifest["target"]
    small = arm_row(rows, model, "small")
    if small is None or small.get("test_accuracy") is None:
        return None
    return "%.4f" % max(small["test_accuracy"] - 0.01, 0.0001)


def cumulative(curve):
    """[(training seconds up to the end of the epoch, test accuracy)] of a row's curve."""
    out, s = [], 0.0
    for secs, acc in curve or []:
        s += secs
        out.append((s, acc))
    return out


def time_to_target(row, target):
    """The training seconds up to the first epoch whose test accuracy reaches target, or None."""
    for s, acc in cumulative(row.get("curve")):
        if acc >= target:
            return s
    return None


def error_pct(measured, predicted):
    """(measured - predicted) / measured x 100, or None."""
    if predicted is None or not measured:
        return None
    return (measured - predicted) / measured * 100


def show_err(e):
    return "n/a" if e is None else "%+.1f %%" % e


def price_of(manifest, model):
    """The price of one node-hour with its GPUs the plan used (tula plan's node_hour_price;
    price_per_node_hour in a manifest written before it had one)."""
    plan = (manifest.get("per_model", {}).get(model) or {}).get("plan_before") or {}
    return plan.get("node_hour_price", plan.get("price_per_node_hour"))


def measured_line(row, name, target, price):
    """A row of the measured table."""
    k, secs, pred = row["nodes"], row["measured_seconds"], row.get("predicted_seconds")
    t = time_to_target(row, float(target)) if target else None
    nh = secs * k / 3600
    pcost = None if pred is None or price is None else pred * k / 3600 * price
    wall = row.get("wall_seconds")
    return (row["model"], name, k, row["global_batch"], row.get("optimizer") or "?",
            "not reached" if t is None else "%.2f" % t, "%.4f" % row["test_accuracy"], "%.2f" % secs,
            "n/a" if pred is None else "%.1f" % pred, show_err(error_pct(secs, pred)), "%.5f" % nh,
            "n/a" if pcost is None else "%.5f" % pcost,
            show_err(None if price is None else error_pct(nh * price, pcost)), "" if wall is None else wall)


def verdict(rows, manifest, model):
    """The model's line under "Targets"."""
    tgt = target_text(rows, manifest, model)
    r = {a: arm_row(rows, model, a) for a, _ in ARMS}
    t = {a: (time_to_target(x, float(tgt)) if x and tgt else None) for a, x in r.items()}
    faster = (t["tula"] is not None and all(t[a] is None or round(t["tula"], 2) < round(t[a], 2) for a in ("large", "small")))
    acc_a, acc_c = r["tula"]["test_accuracy"], r["small"]["test_accuracy"]
    e = error_pct(r["tula"]["measured_seconds"], r["tula"].get("predicted_seconds"))
    e = None if e is None else abs(e)
    s = ("- %s: reaches %s first: %s; accuracy within 1 point of (c): %s (%.4f vs %.4f); prediction within 5 %%: %s%s"
         % (model, tgt, yes(faster), yes(acc_a + 0.01 >= acc_c), acc_a, acc_c,
            "n/a" if e is None else yes(e <= 5), "" if e is None else " (%.1f %%)" % e))
    again = r["tula-again"]
    if again is not None and again.get("predicted_seconds") is not None:
        e2 = abs(error_pct(again["measured_seconds"], again["predicted_seconds"]))
        s += ("; the next submission (a'), planned with the three runs in the history: prediction within 5 %%: %s (%.1f %%)"
              % (yes(e2 <= 5), e2))
    # the anchor: (a) and (a') are the same job when the plan did not change
    a_cfg = (r["tula"]["nodes"], r["tula"]["global_batch"])
    if again is not None and (again["nodes"], again["global_batch"]) == a_cfg:
        ta, tb_ = r["tula"]["measured_seconds"], again["measured_seconds"]
        if ta + tb_ > 0:
            sp = abs(ta - tb_) / ((ta + tb_) / 2) * 100
            s += ("; anchor: (a) and (a') ran the same job (%d x %d), %.2f s and %.2f s: a run-to-run spread of %.1f %% on this machine"
                  % (a_cfg + (ta, tb_, sp)))
            if sp > 0 and e is not None:
                s += " (ratio of (a)'s prediction error to it: %.2f)" % (e / sp)
    # the second anchor: how much the profile that (a) was planned from disagreed with itself
    pn = (manifest.get("per_model", {}).get(model) or {}).get("profile_noise_percent")
    if pn is not None:
        s += "; profile noise: the one-node profile's rounds differ by %.1f %% (median over batch sizes of (max - min) / median)" % pn
        if pn > 0 and e is not None:
            s += " (ratio of (a)'s prediction error to it: %.2f)" % (e / pn)
    return s


def yes(b):
    return "yes" if b else "no"


def hole_result(rows, manifest):
    """experiments.hole's result again, from the hole rows and the manifest's hole setting; None
    where the scenario did not run."""
    h = manifest.get("hole") or {}
    parts = {}
    for variant, arm in (("time_min", "hole-with"), ("no_time_min", "hole-without")):
        r = arm_row(rows, "lenet5", arm)
        if r is None or h.get("status") != "ok":
            return None
        parts[variant] = {"job": r["job"], "state": r["state"], "time_to_result_seconds": r["measured_seconds"],
                          "first_start_seconds": r["first_start_seconds"], "parts": r["parts"],
                          "test_accuracy": r["test_accuracy"]}
    return dict({k: h[k] for k in HOLE_SETTING}, **parts)


# ---- sections ---------------------------------------------------------------------------------

def header(rows, manifest):
    """The report's title and the paragraphs on how it was measured."""
    models, epochs, images = manifest["models"], manifest["epochs"], manifest["train_images"]
    o = ["# Tula end-to-end evaluation", "",
         "Written by `make eval` (experiments/eval.py) on %s; %d s of wall time." % (manifest["made_at"], manifest["seconds"]),
         "Machine: %s, %d CPU cores (%s), load average %s at the end." % (manifest["uname"], manifest["cores"],
                                                                          manifest.get("cpu"), manifest.get("load_average"))]
    if manifest.get("testbed") == "isolated":
        o += ["Cluster: scripts/tula-cluster's isolated testbed on this one machine: each node its own network",
              "namespace with a %s tbf-shaped link and a 0.3-core CPU quota (partition cpu, 4 nodes);" % manifest.get("link_rate"),
              "the nodes still share one kernel, the caches and the memory bandwidth."]
    else:
        o += ["Cluster: scripts/tula-cluster, slurmctld + 4 slurmd (1 CPU each) on this one machine, so a 4-node",
              "job runs 4 ranks on %d shared cores: the node counts are real Slurm allocations, the speed-up is not." % manifest["cores"]]
    o.append("")
    if images < FULL_TRAIN:
        o += ["Reduced to fit the time budget: %d epochs per run (the example script trains 12) and" % epochs,
              "%d of the 60,000 training images per epoch (tula-train --limit-train); all 10,000" % images,
              "test images are evaluated after every epoch."]
    else:
        o += ["Reduced to fit the time budget: %d epochs per run (the example script trains 12), on all" % epochs,
              "60,000 training images; all 10,000 test images are evaluated after every epoch."]
    per = manifest.get("per_model", {})
    bigs = ", ".join("%s %s" % (m, per[m]["big_batch"]) for m in models if m in per)
    targets = "; ".join("%s %s" % (m, target_text(rows, manifest, m)) for m in models)
    how = ("EVAL_TARGET, %s" % manifest["target"] if manifest.get("target") else
           "the final test accuracy of (c) minus 1 point (tula.conf's max_accuracy_loss), what Tula plans (a)'s epochs for")
    prices = ", ".join(sorted({"%g" % price_of(manifest, m) for m in models if price_of(manifest, m) is not None})) or "?"
    o += ["Each job ran from experiments/eval-job.sbatch, examples/fashion-mnist.sbatch's job with the tula-train",
          "arguments below (the end of the report).",
          "Run (a) is the example's tula-train line (tula-train --optimizer auto: plain SGD with linear scaling",
          "up to global batch 256, adaptive gradient scaling above; the table's optimizer column says which ran);",
          "(b) is the standard large-batch recipe done well (Goyal et al. 2017): plain SGD, the rate scaled linearly",
          "with the batch and not capped, a gradual warmup from the base rate over the first %d epoch(s), cosine" % ((epochs + 3) // 4),
          "decay, and the base rate tuned on a validation split (the table below; the test set plays no part);",
          "(c) is plain SGD at batch 64 with tula-train's defaults.",
          "Tula planned for the full data set and %d epochs; its prediction below is tula predict's (the" % epochs,
          "planner's prediction) for the nodes, ranks per node, global batch and epochs each job ran, made before it",
          "ran, with its predicted start-up (startup_seconds, once per run). A multi-node step is the modelled one (compute x",
          "concurrency factor + allreduce) times the sync factor of the synchronized-step profile (tula",
          "profile compute --nodes: the whole training step timed on the same ranks at once); for (a') it is",
          "also multiplied by the residual (measured / predicted with the sync factor) of the run before it",
          "on the same node count, or of both multi-node runs on a node count neither ran on, a 1-node step",
          "by the median ratio of all three runs. Run (b) uses the largest",
          "global batch of tula.conf's global_batches that tula plan finds feasible on 4 nodes (%s);" % bigs,
          "memory is not the limit for these small models. Run (a) trains the epochs its plan gives its batch",
          "(TULA_EPOCHS: what its batch needs to reach the accuracy %d epochs reach at batch 64, by the noise" % epochs,
          "scale); (b) and (c) train %d. The target of each model: %s (%s). Time to target is the sum of the epoch"
          % (epochs, how, targets),
          "times (training loop, no evaluation) up to the first epoch whose test accuracy reaches it,",
          "so it has the resolution of one epoch. Node-hours = nodes x training seconds / 3600; cost =",
          "node-hours x the node-hour price with its GPUs (%s, tula.conf);" % prices,
          "error = (measured - predicted) / measured x 100 %.", ""]
    return o


def measured(rows, manifest):
    """The measured table, the tuning table and the targets."""
    o = ["## Measured on the local cluster", ""]
    table = []
    for m in manifest["models"]:
        tgt, price = target_text(rows, manifest, m), price_of(manifest, m)
        table += [measured_line(r, name, tgt, price) for a, name in ARMS for r in [arm_row(rows, m, a)] if r]
    o += tb.md_table(("model", "run", "nodes", "global batch", "optimizer", "time to target (s)", "final test acc.",
                      "training time (s)", "predicted (s)", "time error", "node-hours", "predicted cost", "cost error",
                      "job wall (s)"), "llrrlrrrrrrrrr", table)
    o += ["", "Run (b)'s base rate, tuned: one 4-node run per multiplier of tula-train's --lr, each holding out",
          "1/6 of its training images (--val-split); the best validation accuracy is (b)'s rate.", ""]
    tune = []
    for m in manifest["models"]:
        best = best_tune(rows, m)
        for r in rows:
            if r.get("model") == m and r.get("arm") == "tune":
                va = r.get("val_accuracy")
                tune.append((m, "%g" % r["lr_mult"], "%g" % r["lr"], "none" if va is None else "%.4f" % va,
                             "yes" if r is best else ""))
    o += tb.md_table(("model", "multiplier", "base rate", "validation accuracy", "chosen"), "lrrrl", tune)
    o += ["", "Targets: Tula's run reaches the target before (b) and (c); its final accuracy is within",
          "1 point of (c)'s; its time and cost predictions are within 5 %.", ""]
    o += [verdict(rows, manifest, m) for m in manifest["models"] if arm_row(rows, m, "tula") and arm_row(rows, m, "small")]
    return o + [""]


def plans(manifest):
    """The plan before and after the runs."""
    o = ["## The plan again, after these runs", "",
         "What `tula plan` (and so the next `sbatch --tula=auto`) chooses once the three jobs above are in the",
         "run history: the noise scale they measured, their test accuracy vs global batch (candidates expected",
         "to lose more than tula.conf's max_accuracy_loss against the best are left out) and their times.",
         "Run (a') in the table above is that plan, submitted and run.", ""]
    table = []
    for m in manifest["models"]:
        note = manifest.get("per_model", {}).get(m) or {}
        b, a = note.get("plan_before"), note.get("plan_after")
        if not a:
            table.append((m, "", "tula plan failed (see the eval log)", "", "", ""))
            continue
        ns = a.get("noise_scale")
        table.append((m, "%d x %d" % (b["nodes"], b["global_batch"]), "%d x %d" % (a["nodes"], a["global_batch"]),
                      "%s (%s)" % ("-" if ns is None else ("%.1f" % ns if isinstance(ns, (int, float)) else ns),
                                   a.get("noise_scale_source") or "-"),
                      a.get("accuracy_excluded") or 0, (a.get("reason") or "").replace("|", "/")))
    o += tb.md_table(("model", "chosen before the runs", "chosen after", "B_noise after (source)",
                      "candidates left out for accuracy", "why (after)"), "llllrl", table)
    return o + [""]


def simulation(manifest):
    """The simulated section's body."""
    sim = manifest.get("simulation") or {}
    st = sim.get("status")
    if st == "unavailable":
        return ["simulation: not available in this build (tula plan has no --hardware FILE option)."]
    if st == "no-file":
        return ["simulation: not run: no cluster description %s (set EVAL_HARDWARE=FILE)." % sim["hardware_file"]]
    if st != "ok":
        return ["simulation: tula plan --hardware %s failed (see the eval log)." % sim.get("hardware_file")]
    o = ["SIMULATED (no job ran): tula plan --hardware %s: %s, %s epochs, %s."
         % (os.path.basename(sim["hardware_file"]), sim["workload"], sim["epochs"], sim["hardware"]), ""]
    o += tb.md_table(("workload", "run", "nodes", "global batch", "predicted time (s)", "predicted node-hours"), "llrrrr",
                     [(sim["workload"], r["run"], r["nodes"], r["global_batch"], trim(r["total_seconds"], 1),
                       trim(r["node_hours"], 4)) for r in sim["runs"]])
    return o


def trim(x, places):
    """x rounded to places decimals, without trailing zeros (143.10 -> 143.1, 16.0 -> 16)."""
    text = "%.*f" % (places, x)
    return (text.rstrip("0").rstrip(".") or "0") if "." in text else text


def hole_section(rows, manifest):
    st = (manifest.get("hole") or {}).get("status")
    if st == "not-run":
        return ["not run: it trains lenet5, which is not in EVAL_MODELS."]
    r = hole_result(rows, manifest)
    if r is None:
        return ["not measured: experiments.hole failed (see the eval log)."]
    return hole.markdown(r).split("\n")


def commands(rows, manifest):
    """How to make it again, what ran and the batch scripts' tula-train lines."""
    env = 'EVAL_MODELS="%s" EVAL_EPOCHS=%d EVAL_LIMIT_TRAIN=%d' % (" ".join(manifest["models"]), manifest["epochs"],
                                                                  manifest["limit_train"])
    if manifest.get("target"):
        env += " EVAL_TARGET=%s" % manifest["target"]
    if manifest.get("eval_out"):
        env += " EVAL_OUT=%s" % manifest["eval_out"]
    o = ["## Commands", "", "    %s make eval" % env, "",
         "which ran ($CLUSTER is the temporary cluster directory; the .sbatch files are",
         "experiments/eval-job.sbatch with the tula-train arguments below):", ""]
    o += ["    " + c for c in manifest.get("commands", [])]
    o += ["", "The batch scripts' tula-train lines:", ""]
    for m in manifest["models"]:
        for arm, label in (("tula", "auto"), ("large", "large"), ("small", "small")):
            r = arm_row(rows, m, arm)
            if r:
                o.append("    %s-%s: tula-train %s" % (m, label, r["trainer_args"]))
    return o


# ---- the report -------------------------------------------------------------------------------

def plot(png, rows, manifest, model):
    """eval-MODEL.png, test accuracy vs training time of the model's runs, with gnuplot; True when
    written."""
    if not shutil.which("gnuplot"):
        return False
    tgt = target_text(rows, manifest, model)
    styles = {"tula": "pt 7", "large": "pt 5", "small": "pt 9", "tula-again": "pt 6 dt 2"}
    per = manifest.get("per_model", {}).get(model) or {}
    with tempfile.TemporaryDirectory() as d:
        lines = []
        for arm, _ in ARMS:
            r = arm_row(rows, model, arm)
            if r is None:
                continue
            path = os.path.join(d, arm + ".curve")
            with open(path, "w") as f:
                f.writelines("%.2f %s\n" % (s, acc) for s, acc in cumulative(r["curve"]))
            title = {"tula": "(a) Tula --tula=auto (%d node%s, batch %d)" % (r["nodes"], "" if r["nodes"] == 1 else "s", r["global_batch"]),
                     "large": "(b) 4 nodes, batch %s, standard recipe (tuned)" % per.get("big_batch", r["global_batch"]),
                     "small": "(c) 1 node, batch 64",
                     "tula-again": "(a') Tula again, after (a)-(c): %d x %d" % (r["nodes"], r["global_batch"])}[arm]
            lines.append('"%s" using 1:2 with linespoints lw 2 %s title "%s" noenhanced' % (path, styles[arm], title))
        if not lines:
            return False
        script = ["set terminal pngcairo size 900,560 font \",11\"", 'set output "%s"' % png,
                  'set title "%s@fashion-mnist on the local 4-node Slurm cluster (measured; %d epochs, %d training images per epoch)" noenhanced'
                  % (model, manifest["epochs"], manifest["train_images"]),
                  'set xlabel "training wall time (s, sum of epoch times)"', 'set ylabel "test accuracy"',
                  "set key bottom right", "set grid"]
        if tgt:
            script.append('set arrow from graph 0, first %s to graph 1, first %s nohead dashtype 2 lc rgb "gray40"' % (tgt, tgt))
        script.append("plot " + ", \\\n     ".join(lines))
        return subprocess.run(["gnuplot"], input="\n".join(script) + "\n", universal_newlines=True).returncode == 0


def report(rows, manifest, out_dir=None):
    """The report's markdown; with out_dir, the figures drawn there (gnuplot) and linked where
    they are there."""
    o = header(rows, manifest) + measured(rows, manifest)
    for m in manifest["models"]:
        png = "eval-%s.png" % m
        if out_dir is not None:
            plot(os.path.join(out_dir, png), rows, manifest, m)
        if out_dir is None or os.path.exists(os.path.join(out_dir, png)):
            o += ["![test accuracy vs training wall time, %s](%s)" % (m, png), ""]
    o += plans(manifest)
    o += ["## Simulated: 512-node GPU cluster", ""] + simulation(manifest) + [""]
    o += ["## Measured: a queue with a hole (time_min)", ""] + hole_section(rows, manifest) + [""]
    o += commands(rows, manifest)
    return "\n".join(o) + "\n"


def write(results):
    """report.md (and the PNGs) from the rows in results."""
    rows, manifest = tb.read_results(results, NAME)
    text = report(rows, manifest, results)
    path = os.path.join(results, "report.md")
    tb.write_text(path, text)
    print(text, end="")
    print("\nreport: %s" % path)
