"""How well Tula predicts jobs with several ranks per node, measured on the isolated testbed
(`make ranks-report`, about 10 minutes on a 2-core machine).

  1. profiles lenet5@fashion-mnist: one rank on a node (under its CPU quota), 2 ranks on each
     of 1-4 nodes of the cpu partition (2 CPUs a node) at once (`tula profile compute
     --ranks-per-node 2`), allreduce across 2-4 nodes and, where `tula profile allreduce` has
     --ranks-per-node, between the 2 ranks of one node;
  2. trains lenet5 for 2 epochs of 12,800 examples with 2 ranks on each of 1-4 nodes at global
     batches 192 and 768 (divisible by 2, 4, 6 and 8 ranks; --optimizer auto: plain SGD at 192,
     AGS at 768, so that no run diverges; tula-train records each run);
  3. `tula validate`: each run is predicted from the profiles and the other runs (leave one
     out); a row per run (results/ranks-report/runs.jsonl, with manifest.json) gives its
     measured and predicted epoch time, and the report the MAPE of the 2-rank runs against the
     target of 5 %.

Usage: python3 -m experiments.ranks_report [--results DIR] [--out FILE] [--from-rows]
--results: the rows' folder (default results/ranks-report); --out: the report (default
report.md in the rows' folder); --from-rows: no cluster,
the report written from the rows. SKIPs (exit 77, one line) where the isolated testbed cannot be
made."""
import os
import sys

from experiments import testbed as tb

NAME = "ranks-report"
WORKLOAD = "lenet5@fashion-mnist"


def measure(results):
    """Inside the cluster: the profiles, the runs and tula validate; writes the results folder."""
    sysdb = os.path.join(tb.in_cluster(NAME), "system.db")
    work = os.path.join(os.getcwd(), NAME)
    os.makedirs(work, exist_ok=True)
    p = tb.Progress(NAME)
    p.step("compute profile: 1 rank on a cpu node, then 2 ranks on each of 1-4 nodes at once")
    # One command on a node of the fast partition (the same 0.3-core quota as a cpu node; a cpu
    # node running it could not be part of the 4-node job of 2 ranks a node it submits): its
    # one-rank rounds run there, under the quota, like the jobs they predict.
    tb.run(["srun", "--quiet", "-p", "fast", "-N", "1", "-n", "1", "-t", "60", "tula", "profile", "compute",
            "--workload", WORKLOAD, "--batch-sizes", "16,32,64,128,256", "--iters", "10", "--rounds", "2",
            "--nodes", "1,2,3,4", "--ranks-per-node", "2", "--partition", "cpu", "--db", sysdb])

    p.step("allreduce profile: across 2-4 nodes, and within a node where supported")
    tb.run(["tula", "profile", "allreduce", "--nodes", "2,3,4", "--partition", "cpu", "--db", sysdb])
    within = "no (tula profile allreduce has no --ranks-per-node here)"
    if "--ranks-per-node" in tb.stdout_of(["tula", "profile", "allreduce", "--help"]):
        tb.run(["tula", "profile", "allreduce", "--ranks-per-node", "2", "--partition", "cpu", "--db", sysdb])
        within = "yes, 2 ranks on one node"

    p.step("runs: lenet5, 2 epochs of 12800 examples, 2 ranks on each of 1-4 nodes")
    for k in (1, 2, 3, 4):
        for b in (192, 768):
            o = os.path.join(work, "run-%d-%d" % (k, b))
            if not tb.sbatch_wait(["-p", "cpu", "-N", str(k), "--ntasks-per-node=2", "-t", "20"],
                                  "mpirun --allow-run-as-root -np %d --map-by slot --bind-to none tula-train --model lenet5"
                                  " --data fashion-mnist --epochs 2 --limit-train 12800 --limit-test 1000 --batch-size %d"
                                  " --optimizer auto" % (2 * k, b), o + ".out"):
                tb.warn(NAME, "the run on %d nodes at batch %d failed (see %s.out)" % (k, b, o))
                continue
            for line in tb.read_text(o + ".out").splitlines():
                if line.startswith("tula-train: done:"):
                    print(line)

    p.step("tula validate (leave one out)")
    validate = os.path.join(work, "validate.json")
    tb.run(["tula", "validate", "--workload", WORKLOAD, "--format", "json"], out=validate)
    runs = [dict(study=NAME, **r) for r in tb.validate_runs(tb.read_json(validate))]
    manifest = dict(study=NAME, workload=WORKLOAD, within_node_allreduce=within,
                    epochs=2, limit_train=12800, **tb.provenance())
    tb.write_results(results, runs, manifest)
    p.step("done")


def report(rows, manifest):
    """(the report's markdown, its summary line)."""
    table, errs = [], []
    for r in sorted(rows, key=lambda r: (r["ranks_per_node"], r["nodes"], r["global_batch"])):
        m, q = r["measured_epoch_seconds"], r["predicted_epoch_seconds"]
        e = abs(q - m) / m * 100
        if r["ranks_per_node"] == 2:
            errs.append(e)
        table.append((r["nodes"], r["ranks_per_node"], r["global_batch"], "%.2f" % m, "%.2f" % q, "%.1f" % e))
    mape = sum(errs) / len(errs) if errs else float("nan")
    verdict = "meets" if errs and mape <= 5 else "misses"
    lines = ["# Predictions for nodes with 2 ranks each (isolated testbed)", "",
             "Made by `make ranks-report` (experiments/ranks_report.py) on %s: lenet5@fashion-mnist on the cpu" % manifest["made_at"][:10],
             "partition (nodes of 2 CPUs, each under its own CPU quota, links shaped by tbf), 2 epochs of",
             "12,800 examples per run. Profiles: 1 rank on a node, 2 ranks on each of 1-4 nodes at once,",
             "allreduce across 2-4 nodes; within-node allreduce profiled: %s." % manifest["within_node_allreduce"], "",
             "Each run is predicted by `tula validate` from the profiles and the other runs (leave one out).", ""]
    lines += tb.md_table(("nodes", "ranks per node", "global batch", "measured epoch (s)", "predicted epoch (s)", "error (%)"),
                         "rrrrrr", table, compact=True)
    lines += ["", "MAPE of the %d runs with 2 ranks per node: **%.1f %%** (target: at most 5 %%; %s it)." % (len(errs), mape, verdict)]
    summary = "%d runs with 2 ranks per node, MAPE %.1f %% (%s the 5 %% target)" % (len(errs), mape, verdict)
    return "\n".join(lines) + "\n", summary


def write_report(results, out):
    text, summary = report(*tb.read_results(results, NAME))
    tb.write_text(out, text)
    print("%s: %s; written to %s" % (NAME, summary, out))


def main(argv=None):
    return tb.one_cluster_main(NAME, "experiments.ranks_report", __doc__, measure, write_report, argv)


if __name__ == "__main__":
    sys.exit(main())
