"""What the isolated testbed (scripts/tula-cluster) does to communication and to Tula's choices,
measured (`make testbed-report`, about 35 minutes on a 2-core machine).

  1. On the default link rate: tula profile allreduce on 2, 3 and 4 nodes at 1, 2, 4 and 8 MB.
     Each size is compared with the shaped rate (a ring allreduce sends 2 (K-1)/K x n bytes over
     each node's link, framed in TCP segments) and with Tula's fitted alpha-beta model (ratios,
     measured / reference, and a verdict on the 10 % target above 1 MB); then 1 and 4 MB again
     with each of the cluster's Open MPI settings undone, to show what each is worth.
  2. The compute profile of lenet5 and fmnist-cnn (on a node, under its CPU quota, and on 2-4
     nodes at once), measured once and imported into every cluster below.
     Its concurrency factors c_K(b) (a step of K ranks at once over one rank alone) and step
     factors (the synchronized step of K ranks over the step Tula models), the corrections Tula
     grew on the shared cluster, are reported as measured on isolated nodes.
  3. For the link rates TULA_REPORT_RATES (default "100mbit 200mbit 400mbit"): a fresh testbed at
     that rate, the one-rank compute samples of step 2, its own allreduce profile on 2, 3 and 4
     nodes, and the plan of both models (`tula plan --format kv`, 12 epochs): the node count and
     global batch at the knee, the predicted time and the Pareto front. At a slower link Tula
     should pick no more nodes, at a faster one no fewer.
  4. On the testbed at the default rate (with all of step 2's samples): one epoch of a training
     subset of each model on 1-4 nodes at global batches 64, 256 and 1024, measured, beside the
     epoch Tula predicts (testbed-scaling-MODEL.png beside the report, with gnuplot); then the
     epochs on more than 2 nodes (4 nodes: none of those global batches is a multiple of 3)
     predicted again from copies of the system and run databases without anything measured on
     more than 2 nodes (fit on 1 and 2 nodes, predict 3 and 4), beside the measured epoch and the
     prediction from all the profiles; then the leave-one-out error of the runs with each of
     Tula's corrections switched in turn.

Every measurement is a row of results/testbed-report/runs.jsonl (its field kind says which: allreduce,
allreduce-fit, variant, concurrency, step-factor, plan, plan-candidate, scaling, extrapolate,
validate), with manifest.json; the report is written from them.

Usage: python3 -m experiments.testbed_report [--results DIR] [--out DIR] [--from-rows] [--keep DIR]
--results: the rows' folder (default results/testbed-report); --out: the report's folder (default
the rows' folder; the report is report.md there); --from-rows: no cluster, the report written from the rows;
--keep: the work folder (the databases, among them the extrapolation's copies fitted on 1-2 nodes,
plans and predictions) moved to DIR instead of removed, to predict the same shapes again.
Environment: TULA_REPORT_RATES, TULA_LINK_RATE (the default rate, 200mbit),
TULA_BUILD_DIR. SKIPs (exit 77, one line) where the isolated testbed cannot be made."""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

from experiments import testbed as tb

NAME = "testbed-report"
MODELS = ("lenet5", "fmnist-cnn")
# the scaling runs: global batches and each model's training subset
SCALE_BATCHES = (64, 256, 1024)
SCALE_EXAMPLES = {"lenet5": 12800, "fmnist-cnn": 3200}
# the corrections' ablation: tula validate's options, in the report's order
ABLATION = ("defaults", "without=concurrency", "without=synced-step", "without=class-scaling", "with=calibration")
# The extrapolation check: fitted on what was measured on at most FIT_NODES nodes.
FIT_NODES = 2
# What `tula db prune` says it removed: "(N compute samples, N allreduce samples, N runs, N workloads)".
PRUNED = re.compile(r"\((\d+) compute samples?, (\d+) allreduce samples?, (\d+) runs?, (\d+) workloads?\)")
# A full TCP segment carries MSS payload bytes (1500-byte MTU, 20 IP, 20 TCP and 12 timestamp
# bytes) and puts WIRE bytes on the wire (the 14-byte Ethernet header too).
MSS, WIRE = 1448, 1514
VARIANTS = (("cluster default (2 links, ring, yielding)", ()),
            ("1 TCP link per pair", ("OMPI_MCA_btl_tcp_links=1",)),
            ("Open MPI's own algorithm choice", ("OMPI_MCA_coll_tuned_use_dynamic_rules=0",)),
            ("busy-waiting ranks", ("OMPI_MCA_mpi_yield_when_idle=0",)))


def row(kind, **fields):
    return dict(study=NAME, kind=kind, **fields)


# ---- inside a cluster -------------------------------------------------------------------------

def profile(work, out):
    """At the default rate: the allreduce profile, its variants, and the compute profiles."""
    log = os.path.join(work, "allreduce.log")
    tb.tee(["tula", "profile", "allreduce", "--nodes", "2,3,4", "--sizes", "1048576,2097152,4194304,8388608",
            "--db", os.path.join(work, "allreduce.db")], log)
    text = tb.read_text(log)
    for k, n, ms in tb.allreduce_samples(text):
        tb.append_row(out, row("allreduce", cluster="profile", nodes=k, bytes=n, ms=ms))
    fit = tb.allreduce_fit(text)
    if fit:
        tb.append_row(out, row("allreduce-fit", cluster="profile", algorithm=fit[0], alpha_us=fit[1], beta_ns=fit[2]))
    # What the cluster's Open MPI settings (tula-cluster's env) are worth: one TCP connection
    # per pair of ranks instead of two, Open MPI's own allreduce algorithm instead of the ring,
    # and ranks that busy-wait instead of yielding the CPU.
    vout = os.path.join(work, "variant.out")
    for k in (2, 3, 4):
        for label, env in VARIANTS:
            wrap = " ".join(("env",) + env + ("mpirun --allow-run-as-root -np %d --map-by node --bind-to none tula-train"
                                              " --profile-allreduce --sizes 1048576,4194304 --no-db" % k,))
            if not tb.sbatch_wait(["-N", str(k), "-p", "cpu", "-t", "10"], wrap, vout):
                tb.warn(NAME, "the allreduce variant '%s' on %d nodes failed" % (label, k))
                continue
            for kk, n, ms in tb.allreduce_samples(tb.read_text(vout)):
                tb.append_row(out, row("variant", setting=label, nodes=kk, bytes=n, ms=ms))
    compute_db = os.path.join(work, "compute.db")
    for m in MODELS:
        tb.on_node(["tula", "profile", "compute", "--workload", m + "@fashion-mnist", "--batch-sizes", "16,32,64,128,256",
                    "--iters", "10" if m == "lenet5" else "4", "--rounds", "2", "--nodes", "2,3,4", "--db", compute_db])
    tb.run(["tula", "db", "export", "--db", compute_db, "-o", os.path.join(work, "compute.json")])
    for m in MODELS:
        show = os.path.join(work, "show-%s.json" % m)
        tb.run(["tula", "db", "show", m + "@fashion-mnist", "--db", compute_db, "--format", "json"], out=show)
        cf = ((tb.read_json(show) or {}).get("compute_model") or {}).get("concurrency_factors", {})
        for k, knots in sorted(cf.items(), key=lambda kv: int(kv[0])):
            for b, f in knots:
                tb.append_row(out, row("concurrency", model=m, ranks=int(k), local_batch=int(b), factor=f))


def plan(work, out, rate, sysdb):
    """At one link rate: the one-rank samples, an allreduce profile and the plans; at the
    default rate also the scaling runs and the ablation."""
    # The one-rank samples only: the samples of K ranks at once also timed their synchronized
    # step, allreduce included, at the link rate of the profiling cluster.
    d = tb.read_json(os.path.join(work, "compute.json"))
    d["compute"] = [c for c in d["compute"] if c.get("ranks", 1) == 1]
    with open(os.path.join(work, "compute-1rank.json"), "w") as f:
        json.dump(d, f)
    tb.run(["tula", "db", "import", "--db", sysdb, os.path.join(work, "compute-1rank.json")], out=os.devnull)
    log = os.path.join(work, "allreduce-%s.log" % rate)
    tb.run(["tula", "profile", "allreduce", "--nodes", "2,3,4", "--sizes", "262144,1048576,4194304", "--db", sysdb], out=log)
    for k, n, ms in tb.allreduce_samples(tb.read_text(log)):
        tb.append_row(out, row("allreduce", cluster="plan", link_rate=rate, nodes=k, bytes=n, ms=ms))
    for m in MODELS:
        kvf, jsf = (os.path.join(work, "plan-%s-%s.%s" % (m, rate, x)) for x in ("kv", "json"))
        tb.run(["tula", "plan", "--workload", m + "@fashion-mnist", "--epochs", "12", "--format", "kv"], out=kvf)
        tb.run(["tula", "plan", "--workload", m + "@fashion-mnist", "--epochs", "12", "--format", "json"], out=jsf)
        got = tb.kv(tb.read_text(kvf))
        tb.append_row(out, row("plan", model=m, link_rate=rate, nodes=tb.number(got.get("nodes")),
                               global_batch=tb.number(got.get("global_batch")),
                               predicted_seconds=tb.number(got.get("predicted_seconds")),
                               node_hours=tb.number(got.get("node_hours"))))
        for c in (tb.read_json(jsf) or {}).get("candidates", []):
            tb.append_row(out, row("plan-candidate", model=m, link_rate=rate, nodes=c["nodes"], global_batch=c["global_batch"],
                                   pareto=bool(c.get("pareto")), time_to_target_seconds=c.get("time_to_target_seconds"),
                                   cost_to_target=c.get("cost_to_target")))
    if rate == os.environ.get("TULA_LINK_RATE_DEFAULT", "200mbit"):
        # the epoch-time figure at the profiling cluster's rate: with every sample
        tb.run(["tula", "db", "import", "--db", sysdb, os.path.join(work, "compute.json")], out=os.devnull)
        scaling(work, out)
        extrapolate(work, out)
        ablation(work, out)


def scaling(work, out):
    """One epoch of each model on 1-4 nodes at each global batch (the training subset), measured
    from the --metrics epoch line; beside it the epoch Tula predicts from the same profiles (tula
    predict --epochs 1 --limit-train N: the only epoch is also the first)."""
    conf = os.path.join(work, "scaling.conf")
    tb.write_text(conf, "system_db = %s\nmax_nodes = 4\nglobal_batches = %s\n"
                  % (os.path.join(os.environ["TULA_CLUSTER_DIR"], "system.db"), ",".join(map(str, SCALE_BATCHES))))
    # the runs are recorded in a database of their own (the jobs inherit XDG_DATA_HOME)
    os.environ["XDG_DATA_HOME"] = os.path.join(work, "xdg")
    shapes = [(k, b) for k in (1, 2, 3, 4) for b in SCALE_BATCHES if b % k == 0]
    for m in MODELS:
        n = SCALE_EXAMPLES[m]
        # every prediction first (tula predict, the planner's prediction): the runs below are
        # recorded in the user's database, and a prediction made after them would be calibrated by them
        for k, b in shapes:
            tb.run(["tula", "predict", "--conf", conf, "--workload", m + "@fashion-mnist", "--nodes", str(k),
                    "--global-batch", str(b), "--epochs", "1", "--limit-train", str(n), "--format", "json"],
                   out=os.path.join(work, "predict-scale-%s-%d-%d.json" % (m, k, b)), check=False, quiet=True)
        for k, b in shapes:
            base = os.path.join(work, "scale-%s-%d-%d" % (m, k, b))
            pred = tb.read_json(os.path.join(work, "predict-scale-%s-%d-%d.json" % (m, k, b)))
            step = (pred or {}).get("step") or {}
            if k > 1 and step.get("synced_profile"):
                tb.append_row(out, row("step-factor", model=m, nodes=k, local_batch=pred["local_batch"],
                                       time_factor=step["time_factor"]))
            if not tb.sbatch_wait(["-N", str(k), "-p", "cpu", "-t", "20"],
                                  "mpirun --allow-run-as-root -np %d --map-by node --bind-to none tula-train --model %s"
                                  " --data fashion-mnist --epochs 1 --limit-train %d --limit-test 256 --batch-size %d"
                                  " --metrics %s.jsonl" % (k, m, n, b, base), base + ".out"):
                tb.warn(NAME, "the %s run on %d nodes at batch %d failed" % (m, k, b))
                continue
            meas = tb.last_epoch_seconds(base + ".jsonl")
            if meas is None:
                tb.warn(NAME, "no epoch time in %s.jsonl" % base)
                continue
            tb.append_row(out, row("scaling", model=m, nodes=k, global_batch=b, examples=n,
                                   measured_epoch_seconds=meas, predicted_epoch_seconds=tb.predicted_seconds(pred)))


def copy_db(src, dst):
    """Copies the profile database at src into a new database at dst through Tula's own export
    and import (`tula db export`, then `tula db import`, tula(1)): its workloads, profiles and
    runs. False where there is no file src. Raises RuntimeError when tula fails, with its
    message."""
    if not os.path.isfile(src):
        return False
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    for f in (dst, dst + "-wal", dst + "-shm"):
        if os.path.exists(f):
            os.remove(f)
    with tempfile.TemporaryDirectory(prefix="copy-db.") as d:
        dump = os.path.join(d, "export.json")
        for cmd in (["tula", "db", "export", "--db", src, "--output", dump], ["tula", "db", "import", "--db", dst, dump]):
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode != 0:
                raise RuntimeError("%s: %s" % (" ".join(cmd), (p.stderr or p.stdout).strip()))
    return True


def prune_db(path, nodes):
    """Removes from the profile database at path what was measured on more than nodes nodes, in one
    transaction (`tula db prune --nodes-above`, tula(1)); returns {kind: rows removed} with the
    kinds compute, allreduce, runs and workloads. Raises RuntimeError when tula fails or says
    something else."""
    p = subprocess.run(["tula", "db", "prune", "--db", path, "--nodes-above", str(nodes)],
                       capture_output=True, text=True)
    m = PRUNED.search(p.stdout)
    if p.returncode != 0 or not m:
        raise RuntimeError("tula db prune --db %s --nodes-above %d: %s" % (path, nodes, (p.stderr or p.stdout).strip()))
    return dict(zip(("compute", "allreduce", "runs", "workloads"), map(int, m.groups())))


def extrapolate(work, out):
    """Each scaling shape on more than FIT_NODES nodes predicted again from copies of the system
    database and the user's run database without anything measured on more than FIT_NODES nodes
    (prune_db): the profiles and the recorded runs of 1-2 nodes, as a site's history would have
    them (tula predict's default corrections). A row per shape beside its measured epoch."""
    d = tempfile.mkdtemp(prefix="extrapolate.", dir=work)
    sysdb, xdg = os.path.join(d, "system.db"), os.path.join(d, "xdg")
    rundb = os.path.join(xdg, "tula", "profiles.db")
    if not copy_db(os.path.join(os.environ["TULA_CLUSTER_DIR"], "system.db"), sysdb):
        tb.warn(NAME, "no system database to fit on 1-%d nodes" % FIT_NODES)
        return
    runs = copy_db(os.path.join(os.environ["XDG_DATA_HOME"], "tula", "profiles.db"), rundb)
    if not runs:
        tb.warn(NAME, "no recorded runs: the 3-4-node predictions are made from the profiles alone")
    for db in (sysdb, rundb) if runs else (sysdb,):
        gone = prune_db(db, FIT_NODES)
        print("%s: %s: removed %s" % (NAME, db, ", ".join("%d %s" % (n, t) for t, n in gone.items())))
    conf = os.path.join(d, "extrapolate.conf")
    tb.write_text(conf, "system_db = %s\nmax_nodes = 4\nglobal_batches = %s\n" % (sysdb, ",".join(map(str, SCALE_BATCHES))))
    # --db names the databases read (instead of system_db and then the user's); XDG_DATA_HOME
    # points at the copy too, so that nothing reads the run database with the 3-4-node runs
    dbs = ["--db", sysdb] + (["--db", rundb] if runs else [])
    shapes = [r for r in tb.rowsmod.read_rows(out) if r["kind"] == "scaling" and r["nodes"] > FIT_NODES]
    saved = os.environ["XDG_DATA_HOME"]
    os.environ["XDG_DATA_HOME"] = xdg
    try:
        for r in shapes:
            m, k, b = r["model"], r["nodes"], r["global_batch"]
            path = os.path.join(d, "predict-%s-%d-%d.json" % (m, k, b))
            rc = tb.run(["tula", "predict", "--conf", conf] + dbs +
                        ["--workload", m + "@fashion-mnist", "--nodes", str(k), "--global-batch", str(b), "--epochs", "1",
                         "--limit-train", str(r["examples"]), "--format", "json"], out=path, check=False, quiet=True)
            if rc != 0:
                tb.warn(NAME, "tula predict of %s on %d nodes at batch %d from 1-%d nodes failed (exit %d)"
                        % (m, k, b, FIT_NODES, rc))
            tb.append_row(out, row("extrapolate", model=m, nodes=k, global_batch=b,
                                   measured_epoch_seconds=r["measured_epoch_seconds"],
                                   predicted_epoch_seconds=tb.predicted_seconds(tb.read_json(path))))
    finally:
        os.environ["XDG_DATA_HOME"] = saved


def ablation(work, out):
    """The leave-one-out error of the recorded scaling runs (tula validate: each run predicted by
    the models refitted without it) with the default corrections, then with each switched off
    (--without) and the time calibration switched on (--with)."""
    conf = os.path.join(work, "scaling.conf")
    for w in ABLATION:
        path = os.path.join(work, "validate-%s.json" % w)
        tb.run(["tula", "validate", "--conf", conf, "--db", os.path.join(os.environ["TULA_CLUSTER_DIR"], "system.db"),
                "--db", os.path.join(os.environ["XDG_DATA_HOME"], "tula", "profiles.db")]
               + ([] if w == "defaults" else ["--" + w]) + ["--format", "json"], out=path, check=False, quiet=True)
        for r in tb.validate_runs(tb.read_json(path)):
            tb.append_row(out, row("validate", change=w, **r))


def inside(args):
    """--profile or --plan RATE, inside the cluster: rows appended to $TULA_REPORT_WORK/rows.jsonl."""
    work = os.environ.get("TULA_REPORT_WORK")
    if not work:
        tb.die(NAME, "--profile and --plan are run by the report itself")
    sysdb = os.path.join(tb.in_cluster(NAME), "system.db")
    out = os.path.join(work, "rows.jsonl")
    if args.profile:
        profile(work, out)
    else:
        plan(work, out, args.plan, sysdb)


# ---- the report -------------------------------------------------------------------------------

def rate_bps(rate):
    """Bits per second of a tc rate ("200mbit")."""
    m = re.match(r"([0-9.]*)(.*)", rate)
    n = float(m.group(1) or 0)
    return n * {"gbit": 1e9, "mbit": 1e6, "kbit": 1e3}.get(m.group(2), 1)


def beta_link_ns(rate):
    """The link's nanoseconds per payload byte at rate, as the report prints it (4 decimals)."""
    return float("%.4f" % (8e9 / rate_bps(rate) * WIRE / MSS))


def ring_bytes(k, n):
    """The bytes a ring allreduce of n bytes over k nodes puts through each node's link."""
    return 2 * (k - 1) / k * n


def model_ms(k, n, fit):
    alg, alpha, beta = fit
    steps = 2 * (k - 1)
    if alg == "rabenseifner":
        steps, p = 0, 1
        while p < k:
            steps, p = steps + 2, p * 2
    return steps * alpha / 1000 + ring_bytes(k, n) * beta / 1e6


def allreduce_table(rows, bl, fit):
    """(nodes, bytes, measured, link, measured / link, model, measured / model) a sample of the
    profiling cluster, as printed."""
    out = []
    for r in rows:
        if r["kind"] == "allreduce" and r["cluster"] == "profile":
            k, n, ms = r["nodes"], r["bytes"], r["ms"]
            link, model = ring_bytes(k, n) * bl / 1e6, model_ms(k, n, fit)
            out.append((k, n, "%.1f" % ms, "%.1f" % link, ratio(ms, link), "%.1f" % model, ratio(ms, model)))
    return out


def ratio(a, b):
    return "%.2f" % (a / b) if b > 0 else "nan"


def verdict(table, col):
    """"N of M points": the table's rows above 1 MB whose ratio in column col (4: measured /
    link, 6: measured / model), as printed, is within 10 %."""
    big = [t for t in table if t[1] > 1048576]
    ok = sum(t[col] != "nan" and 1 / 1.1 <= float(t[col]) <= 1.1 for t in big)
    return "%d of %d points" % (ok, len(big))


def plot(png, m, rate, scale):
    """testbed-scaling-MODEL.png with gnuplot; True when written."""
    if not shutil.which("gnuplot"):
        return False
    with tempfile.TemporaryDirectory() as d:
        for b in SCALE_BATCHES:
            with open(os.path.join(d, "%d.tsv" % b), "w") as f:
                for r in scale:
                    if r["global_batch"] == b:
                        p = r["predicted_epoch_seconds"]
                        f.write("%d\t%d\t%.3f\t%s\n" % (r["nodes"], b, r["measured_epoch_seconds"], "nan" if p is None else "%.3f" % p))
        script = "\n".join([
            "set terminal pngcairo size 800,500", 'set output "%s"' % png,
            'set title "%s: one epoch of the subset on the testbed (%s links, 0.3-core nodes)"' % (m, rate),
            'set xlabel "nodes"', 'set ylabel "seconds per epoch"', "set xtics 1", "set key outside",
            'plot for [b in "64 256 1024"] "%s/".b.".tsv" using 1:3 with points pt 7 title "measured, B = ".b, \\' % d,
            '     for [b in "64 256 1024"] "%s/".b.".tsv" using 1:4 with lines title "predicted, B = ".b' % d, ""])
        return subprocess.run(["gnuplot"], input=script, universal_newlines=True, stderr=subprocess.DEVNULL).returncode == 0


def report(rows, manifest, out_dir=None):
    """The report's markdown; with out_dir, the figures written there (gnuplot) and linked."""
    rate, rates, models = manifest["link_rate"], manifest["rates"], manifest["models"]
    bl = beta_link_ns(rate)
    fits = [r for r in rows if r["kind"] == "allreduce-fit" and r["cluster"] == "profile"]
    fit = (fits[-1]["algorithm"], fits[-1]["alpha_us"], fits[-1]["beta_ns"]) if fits else (None, 0, 0)
    table = allreduce_table(rows, bl, fit)
    o = ["# The isolated testbed: communication and the choices it makes", "",
         "Written by `make testbed-report` (experiments/testbed_report.py) on %s, %d s;" % (manifest["made_at"], manifest["seconds"]),
         "%s, %d cores. Testbed: scripts/tula-cluster (each node its own network namespace, a" % (manifest["uname"], manifest["cores"]),
         "tbf-shaped link in both directions, a 0.3-core CPU quota; partition cpu, 4 nodes). One run, no repeats:",
         "the figures carry the noise of one measurement.", "",
         "## Allreduce against the link rate (%s) and the fitted model" % rate, "",
         "Tula's fit over these samples: %s, alpha = %s us per step, beta = %s ns per byte"
         % (fit[0] or "?", "%.2f" % fit[1] if fits else "?", "%.4f" % fit[2] if fits else "?"),
         "(ring: 2 (K-1) alpha + 2 (K-1)/K n beta; rabenseifner: 2 ceil(log2 K) alpha + 2 (K-1)/K n beta).",
         "\"Link\" is the time a ring allreduce needs at the shaped rate: 2 (K-1)/K n bytes through each",
         "node's link, in TCP segments of %d bytes that take %d bytes on the wire (Ethernet, IP and TCP" % (MSS, WIRE),
         "headers with timestamps; tbf counts them): beta_link = %.4f ns per byte." % bl,
         "The fitted beta is %.3f times beta_link." % (fit[2] / bl), "",
         "Within 10 %% above 1 MB (sizes > 1048576 bytes): of the model, %s; of the link, %s."
         % (verdict(table, 6), verdict(table, 4)), ""]
    o += tb.md_table(("nodes", "bytes", "measured ms", "link ms", "measured / link", "model ms", "measured / model"),
                     "rrrrrrr", table)
    o += ["", "Where the time beyond the link goes: the same allreduce with one setting changed (one job each).", ""]
    o += tb.md_table(("setting", "nodes", "bytes", "measured ms", "measured / link"), "lrrrr",
                     [(r["setting"], r["nodes"], r["bytes"], "%.1f" % r["ms"], ratio(r["ms"], ring_bytes(r["nodes"], r["bytes"]) * bl / 1e6))
                      for r in rows if r["kind"] == "variant"])
    o += ["", "## The co-location corrections, measured on isolated nodes", "",
          "Concurrency factor c_K(b): seconds per step of K ranks at once (one per node) over one rank alone,",
          "at local batch b, as Tula's compute model holds it. Step factor: the synchronized step of K ranks",
          "at once (compute and allreduce, timed by the same ranks) over the step Tula models from the",
          "one-rank profile, the concurrency factor and the allreduce profile; the planner multiplies its",
          "modelled step by it (`tula plan --nodes K --format json`: time_factor, before any run history).", ""]
    for m in models:
        cf = {}
        for r in rows:
            if r["kind"] == "concurrency" and r["model"] == m:
                cf.setdefault(r["ranks"], []).append("b=%d %.2f" % (r["local_batch"], r["factor"]))
        o += ["%s: concurrency factors " % m + ("; ".join("K=%d: " % k + ", ".join(v) for k, v in sorted(cf.items())) or "none"), ""]
        steps = {(r["nodes"], r["local_batch"]): r["time_factor"] for r in rows if r["kind"] == "step-factor" and r["model"] == m}
        o += ["%s: step factors " % m + ("; ".join("K=%d b=%d %.2f" % (k, b, v) for (k, b), v in sorted(steps.items())) or "none"), ""]
    plans = {(r["model"], r["link_rate"]): r for r in rows if r["kind"] == "plan"}
    o += ["## The knee against the link rate", "",
          "`tula plan --workload MODEL@fashion-mnist --epochs 12` on a testbed at each rate, with the same",
          "one-rank compute profile (measured once) and an allreduce profile measured at that rate (the",
          "samples of K ranks at once are left out: they timed the synchronized step at the profiling rate).", ""]
    knee = []
    for m in models:
        for r in rates:
            p = plans.get((m, r), {})
            knee.append((m, r, show(p.get("nodes")), show(p.get("global_batch")), show(p.get("predicted_seconds"), "%.1f") + " s",
                         show(p.get("node_hours"), "%.4f")))
    o += tb.md_table(("model", "link", "nodes", "global batch", "predicted training", "node-hours"), "llrrrr", knee)
    o += ["", "The Pareto front of each plan (nodes x global batch: predicted time and node-hours to the",
          "accuracy target, which the knee is taken on), cheapest first:", ""]
    for m in models:
        for r in rates:
            cands = [c for c in rows if c["kind"] == "plan-candidate" and c["model"] == m and c["link_rate"] == r]
            if cands:
                front = sorted((c for c in cands if c["pareto"]), key=lambda c: c["cost_to_target"])
                o.append("- %s at %s: " % (m, r) + "; ".join("%d x %d: %.0f s, %.3f" % (c["nodes"], c["global_batch"],
                                                                                          c["time_to_target_seconds"], c["cost_to_target"])
                                                               for c in front))
    o += ["", "The choice moves with the link as it should when, for each model, the node count does not rise",
          "as the link slows down:", ""]
    for m in models:
        nodes = [plans.get((m, r), {}).get("nodes") for r in rates]  # slowest first
        ok = all(a is None or b is None or b >= a for a, b in zip(nodes, nodes[1:]))
        o.append("- %s: %s (nodes from the slowest link to the fastest: %s)"
                 % (m, "yes" if ok else "no", " ".join(show(n) for n in nodes)))
    o += ["", "## Epoch time against the node count (%s)" % rate, "",
          "One epoch of a training subset (lenet5: 12,800 examples, fmnist-cnn: 3,200), measured (the --metrics",
          "epoch seconds, evaluation excluded) and predicted by Tula from the same profiles (tula predict, the",
          "planner's prediction; no run history, so no calibration). Error = (measured - predicted) / measured.", ""]
    for m in models:
        scale = [r for r in rows if r["kind"] == "scaling" and r["model"] == m]
        if not scale:
            continue
        t = []
        for r in scale:
            q, p = r["measured_epoch_seconds"], r["predicted_epoch_seconds"]
            t.append((m, r["nodes"], r["global_batch"], "%.2f" % q, "nan" if p is None else "%.3f" % p, error_text(q, p)))
        o += [""] + tb.md_table(("model", "nodes", "global batch", "measured s", "predicted s", "error"), "lrrrrr", t)
        if out_dir is not None:
            png = "testbed-scaling-%s.png" % m
            if plot(os.path.join(out_dir, png), m, rate, scale):
                o += ["", "![%s: epoch time vs nodes](%s)" % (m, png)]
    o += extrapolation(rows, models, rate)
    held = [r for r in rows if r["kind"] == "validate"]
    if held:
        o += ["", "## The corrections, switched in turn (%s)" % rate, "",
              "Leave-one-out over the runs above (tula validate: each run predicted by the models refitted",
              "without it), with the default corrections, then with one switched off (--without NAME) or the",
              "time calibration of the other runs switched on (--with calibration); docs/models.md,",
              "Corrections. MAPE of the epoch time.", ""]
        t = []
        for w in ABLATION:
            errs = [abs(r["predicted_epoch_seconds"] - r["measured_epoch_seconds"]) / r["measured_epoch_seconds"]
                    for r in held if r["change"] == w and r["measured_epoch_seconds"] > 0]
            t.append((w, len(errs), ("%.2f" % (100 * sum(errs) / len(errs)) if errs else "nan") + " %"))
        o += tb.md_table(("corrections", "runs", "MAPE"), "lrr", t)
    return "\n".join(o) + "\n"


def error_text(measured, predicted):
    """(measured - predicted) / measured as printed, "n/a" without a prediction."""
    return "n/a" if predicted is None or measured <= 0 else "%+.1f %%" % ((measured - predicted) / measured * 100)


def mape(pairs):
    """The mean absolute percentage error of (measured, predicted) pairs, or None without any."""
    errs = [abs(p - q) / q for q, p in pairs if p is not None and q > 0]
    return 100 * sum(errs) / len(errs) if errs else None


def extrapolation(rows, models, rate):
    """The section of the extrapolate rows: per model its shapes, then the MAPE of the shapes with
    both predictions, fitted on 1-2 nodes and on all of them (the scaling rows)."""
    o = ["", "## Fit on 1-%d nodes, predict 3-4 (%s)" % (FIT_NODES, rate), ""]
    ext = [r for r in rows if r["kind"] == "extrapolate"]
    if not ext:
        return o + ["Not measured: the rows hold no extrapolate row."]
    o += ["The shapes above on more than %d nodes (a global batch that is not a multiple of the node count has" % FIT_NODES,
          "none) predicted again by tula predict from copies of the system and run databases from which",
          "everything measured on more than %d nodes was deleted: the allreduce samples, the compute samples" % FIT_NODES,
          "timed by ranks on more than %d nodes at once and the recorded runs. The 1-%d-node runs above are" % (FIT_NODES, FIT_NODES),
          "left as the run history a site would have (with the default corrections its multi-node runs fit",
          "the overlap exponent; the time calibration is off). \"Fitted on all nodes\" is the prediction of",
          "the table above (every profile, no run history). Error = (measured - predicted) / measured; the",
          "MAPE is taken over the shapes with both predictions."]
    full = {(r["model"], r["nodes"], r["global_batch"]): r.get("predicted_epoch_seconds") for r in rows if r["kind"] == "scaling"}
    both = []
    for m in models:
        mine = [r for r in ext if r["model"] == m]
        if not mine:
            continue
        t, pairs = [], []
        for r in mine:
            q, p, a = r["measured_epoch_seconds"], r["predicted_epoch_seconds"], full.get((m, r["nodes"], r["global_batch"]))
            t.append((r["nodes"], r["global_batch"], "%.2f" % q, "nan" if p is None else "%.3f" % p, error_text(q, p)))
            if p is not None and a is not None and q > 0:
                pairs.append((q, p, a))
        o += ["", "### %s" % m, ""]
        o += tb.md_table(("nodes", "global batch", "measured s", "predicted s", "error"), "rrrrr", t)
        o += ["", mape_line(m, pairs)]
        both += pairs
    o += ["", mape_line("Both models", both)]
    return o + small_fit_allreduce(rows)


def ring_fit(samples):
    """(alpha in us, beta in ns per byte) of the ring form 2 (K-1) alpha + 2 (K-1)/K n beta fitted
    by non-negative least squares in ms (scipy.optimize.nnls) to allreduce rows (nodes K >= 2,
    bytes n, ms); None with fewer than 2 distinct (nodes, bytes) among them."""
    from scipy.optimize import nnls
    pts = [s for s in samples if s["nodes"] >= 2]
    if len({(s["nodes"], s["bytes"]) for s in pts}) < 2:
        return None
    a = [[2 * (s["nodes"] - 1) / 1000, ring_bytes(s["nodes"], s["bytes"]) / 1e6] for s in pts]
    x, _ = nnls(a, [s["ms"] for s in pts])
    return float(x[0]), float(x[1])


def small_fit_allreduce(rows):
    """Where the extrapolation loses time: the profiling cluster's allreduce samples on at most
    FIT_NODES nodes fitted alone (ring_fit), against the samples on more nodes at 2 MB and less
    (where the per-step latency is a large part of an allreduce), and the range of the step
    factors on at most and on more than FIT_NODES nodes. [] without such samples."""
    prof = [r for r in rows if r["kind"] == "allreduce" and r["cluster"] == "profile"]
    fit = ring_fit([r for r in prof if r["nodes"] <= FIT_NODES])
    more = sorted((r for r in prof if r["nodes"] > FIT_NODES and r["bytes"] <= 2 ** 21),
                  key=lambda r: (r["nodes"], r["bytes"]))
    if fit is None or not more:
        return []
    alpha, beta = fit
    o = ["", "Where the time goes missing: the ring form (2 (K-1) alpha + 2 (K-1)/K n beta) fitted here",
         "(non-negative least squares, scipy) to the allreduce samples on 1-%d nodes alone gives" % FIT_NODES,
         "alpha = %.1f us, beta = %.2f ns per byte; on more nodes, at 2 MB and less," % (alpha, beta),
         "against what was measured (error = (measured - fitted) / measured; > 0: the fit falls short):", ""]
    t = []
    for r in more:
        p = model_ms(r["nodes"], r["bytes"], ("ring", alpha, beta))
        t.append((r["nodes"], r["bytes"], "%.1f" % r["ms"], "%.1f" % p, error_text(r["ms"], p)))
    o += tb.md_table(("nodes", "bytes", "measured ms", "fitted on 1-%d nodes, ms" % FIT_NODES, "error"), "rrrrr", t)
    sf = [r for r in rows if r["kind"] == "step-factor"]
    small = [r["time_factor"] for r in sf if r["nodes"] <= FIT_NODES]
    large = [r["time_factor"] for r in sf if r["nodes"] > FIT_NODES]
    if small and large:
        o += ["", ("The step factors above grow with the node count as well: %.2f to %.2f on %d nodes, %.2f to %.2f on "
                   "more; fitted on 1-%d nodes, a step of more nodes takes the factors of the largest profiled count "
                   "(ComputeModel::synced_factor_at).") % (min(small), max(small), FIT_NODES, min(large), max(large),
                                                           FIT_NODES)]
    return o


def mape_line(what, pairs):
    """The MAPE of (measured, fitted on 1-2 nodes, fitted on all) triples, as printed."""
    one = mape([(q, p) for q, p, _ in pairs])
    every = mape([(q, a) for q, _, a in pairs])
    if one is None:
        return "%s: MAPE n/a (no shape with both predictions)." % what
    return ("%s: MAPE %.2f %% fitted on 1-%d nodes, %.2f %% fitted on all nodes; shapes with both predictions: %d."
            % (what, one, FIT_NODES, every, len(pairs)))


def show(x, form="%s"):
    return "" if x is None else form % x


def main(argv=None):
    ap = argparse.ArgumentParser(prog="testbed_report", description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", default=os.environ.get("TULA_REPORT_RESULTS") or os.path.join(tb.REPO, "results", NAME))
    ap.add_argument("--out", help="the report's folder (default: the rows' folder)")
    ap.add_argument("--from-rows", action="store_true")
    ap.add_argument("--keep", metavar="DIR",
                    help="move the work folder (databases, plans, predictions) to DIR instead of removing it")
    ap.add_argument("--profile", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--plan", metavar="RATE", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.profile or a.plan:
        return tb.inside(NAME, inside, a)
    results = os.path.abspath(a.results)
    out_dir = os.path.abspath(a.out or results)
    if not a.from_rows:
        measure(results, a.keep)
    rows, manifest = tb.read_results(results, NAME)
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "report.md")
    text = report(rows, manifest, out_dir)
    tb.write_text(path, text)
    print("%s: wrote %s" % (NAME, path))
    print(text, end="")
    return 0


def measure(results, keep=None):
    """Outside: one cluster per measurement; the rows and manifest written to results; the work
    folder moved to `keep` when given, else removed."""
    rates = (os.environ.get("TULA_REPORT_RATES") or "100mbit 200mbit 400mbit").split()  # slowest first
    p = tb.Progress(NAME)
    work = tempfile.mkdtemp(prefix="tula-testbed-report.", dir=os.environ.get("TMPDIR") or "/tmp")
    try:
        env = dict(os.environ, TULA_REPORT_WORK=work)
        p.say("allreduce and compute profiles at the default link rate")
        rc = tb.cluster_run("experiments.testbed_report", ["--profile"], env)
        if rc == 77:
            print("SKIP %s: the isolated testbed cannot be made on this machine" % NAME)
            sys.exit(77)
        if rc != 0:
            tb.die(NAME, "profiling failed (exit %d)" % rc)
        for r in rates:
            p.say("plans at link rate %s" % r)
            if tb.cluster_run("experiments.testbed_report", ["--plan", r], dict(env, TULA_LINK_RATE=r)) != 0:
                tb.die(NAME, "plans at %s failed" % r)
        rows = tb.rowsmod.read_rows(os.path.join(work, "rows.jsonl"))
    finally:
        if keep:
            shutil.move(work, keep)
            print("%s: the work folder is in %s" % (NAME, keep))
        else:
            shutil.rmtree(work, ignore_errors=True)
    manifest = dict(study=NAME, link_rate=os.environ.get("TULA_LINK_RATE") or "200mbit", rates=rates, models=list(MODELS),
                    seconds=p.seconds(), **tb.provenance())
    tb.write_results(results, rows, manifest)


if __name__ == "__main__":
    sys.exit(main())
