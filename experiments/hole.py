"""The backfill-hole scenario: the same tula-train job submitted with and without --time-min,
while another user's reservation takes every node of the partition a little later.

Run inside a Tula testbed (scripts/tula-cluster exec DIR -- python3 -m experiments.hole ...):

  1. `tula plan --script JOB --format kv` gives the job's time_min (minutes): the shortest useful
     part (start-up, one epoch and the stop reserve, libtula/include/tula/stop.hpp);
  2. a reservation for user `nobody` takes every node of the partition from time_min + LEAD
     seconds from now, for HOLD minutes: the nodes are free now, in a hole of time_min + LEAD;
     LEAD is --lead plus three times the seconds step 1's plan took (the plan with the hole and
     the submission's own plan come before the start), and when the submitted job's --time-min
     no longer fits before the reservation, the reservation moves to start that --time-min plus
     --lead after that moment (the result says by how many seconds);
  3. the job is submitted twice with `sbatch --tula=auto`: with `--tula-time-min=yes` (Slurm may
     start it in the hole with the shorter limit; tula-train checkpoints before that limit,
     requeues itself, and the rest runs after the reservation) and with `--tula-time-min=no`
     (it waits for the reservation to end, then runs whole);
  4. each job's time to result is its last part's end minus its submission, seconds.

Before the submissions, `tula plan --time-min yes` gives what the planner expects with the hole
there: its `hole` line (the parts in the hole and after it) and its queue note.

Prints one JSON object (`--out FILE` also writes it): the plan's hole line, and per variant the job id, the time to result,
the number of parts (Restarts + 1), the first start's delay, the final state, the test accuracy
of tula-train's done line, the batch host, the --time-min and time limit Slurm gave it (seconds);
and the reservation's start, length and how far it moved. Exits 1 with a `tula: hole:`
line when a step fails (the reservation is deleted and both jobs cancelled on the way out).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
            "PREEMPTED", "BOOT_FAIL", "DEADLINE"}


# Seconds between a submission and backfill's start of the job (two cycles of the testbed's
# bf_interval=2, etc/slurm.conf.in): a hole shorter than --time-min plus this is a hole missed.
SCHEDULE_SLACK = 5


class ScenarioError(Exception):
    """A step of the scenario failed; the message says which and why."""


def run(cmd, check=True):
    """Runs cmd (a list), returns its stdout (str); raises ScenarioError on a non-zero exit."""
    p = subprocess.run(cmd, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise ScenarioError("%s exited %d: %s" % (" ".join(cmd), p.returncode, (p.stderr or p.stdout).strip()[-400:]))
    return p.stdout


def kv(text):
    """`key=value` lines -> dict of str."""
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def job_fields(job):
    """`scontrol show job -o JOB` as a dict; {} once slurmctld has forgotten the job."""
    p = subprocess.run(["scontrol", "show", "job", "-o", str(job)], capture_output=True, text=True)
    if p.returncode != 0:
        return {}
    return dict(m.groups() for m in re.finditer(r"(\w+)=(\S*)", p.stdout))


def slurm_time(text):
    """Slurm's 2026-11-27T20:40:48 (local time) -> seconds since the epoch; None if unset."""
    try:
        return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))
    except (TypeError, ValueError):
        return None


def slurm_seconds(text):
    """Slurm's [D-]HH:MM:SS (or MM:SS) as seconds, or None (N/A, UNLIMITED, unset)."""
    m = re.fullmatch(r"(?:([0-9]+)-)?(?:([0-9]+):)?([0-9]+):([0-9]+)", text or "")
    if not m:
        return None
    d, h, mi, s = (int(x or 0) for x in m.groups())
    return ((d * 24 + h) * 60 + mi) * 60 + s


def write_job(path, trainer_args, db):
    """The batch script: one node, one rank started with srun, tula-train with trainer_args."""
    with open(path, "w") as f:
        f.write("#!/bin/bash\n#SBATCH -N 1 --ntasks-per-node=1 --open-mode=append\n"
                "export SLURM_EXPORT_ENV=ALL\n"
                "srun %s %s --db %s\n" % (os.environ.get("TULA_TRAIN", "tula-train"), trainer_args, db))


def partition_nodes(partition):
    """The node list of the partition (`sinfo -h -p P -o %N`)."""
    nodes = run(["sinfo", "-h", "-p", partition, "-o", "%N"]).strip()
    if not nodes:
        raise ScenarioError("partition %s has no nodes" % partition)
    return nodes


def wait_all(jobs, limit_s, progress):
    """Polls until every job is in a terminal state; returns {job: fields at its end}."""
    seen = {}
    last = {}
    t0 = time.time()
    while len(seen) < len(jobs):
        for j in jobs:
            if j in seen:
                continue
            f = job_fields(j)
            state = f.get("JobState", "GONE")
            if state != last.get(j):
                progress("job %s: %s (restarts %s)" % (j, state, f.get("Restarts", "?")))
                last[j] = state
            if state in TERMINAL or state == "GONE":
                seen[j] = f
        if time.time() - t0 > limit_s:
            raise ScenarioError("jobs %s not finished after %d s" % (
                " ".join(j for j in jobs if j not in seen), limit_s))
        time.sleep(1)
    return seen


def accuracy_of(out_file):
    """The test accuracy of the last `tula-train: done:` line of a job's output, or None."""
    try:
        with open(out_file) as f:
            acc = re.findall(r"^tula-train: done: .* test_accuracy=([0-9.]+)", f.read(), re.M)
    except OSError:
        return None
    return float(acc[-1]) if acc else None


def keep_hole(a, job, resv_start, progress):
    """When the job's --time-min (its submission's plan) no longer fits before the reservation
    (a slow plan or submission ate the lead), moves the reservation's start to the job's time_min
    plus the lead from now; returns the seconds it moved (0 when the job fits or has started)."""
    f = job_fields(job)
    need = slurm_seconds(f.get("TimeMin"))
    if f.get("JobState") != "PENDING" or need is None:
        return 0
    if time.time() + need + SCHEDULE_SLACK <= resv_start:
        return 0
    start = int(time.time() + need + a.lead)
    run(["scontrol", "update", "reservationname=" + a.reservation,
         "starttime=" + time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(start))])
    progress("job %s's time_min of %d s did not fit the %d s left before the reservation: moved it %d s later" % (
        job, need, resv_start - time.time(), start - resv_start))
    return start - resv_start


def scenario(a, progress):
    work = os.path.abspath(a.workdir)
    os.makedirs(work, exist_ok=True)
    script = os.path.join(work, "hole.sbatch")
    write_job(script, a.trainer_args, os.path.join(work, "runs-$SLURM_JOB_ID.db"))
    t0 = time.time()
    plan = kv(run([os.environ.get("TULA", "tula"), "plan", "--script", script, "--format", "kv"]))
    plan_s = time.time() - t0
    if plan.get("status") != "ok" or not plan.get("time_min", "").isdigit():
        raise ScenarioError("tula plan gave no time_min: %s" % plan)
    time_min = int(plan["time_min"])
    nodes = partition_nodes(a.partition)
    # the plan with the hole and the submission's own plan run before the job can start in it
    lead = a.lead + int(3 * plan_s + 0.5)
    hole = time_min * 60 + lead
    resv_start = int(time.time() + hole)
    run(["scontrol", "create", "reservation", "reservationname=" + a.reservation,
         "starttime=" + time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(resv_start)),
         "duration=%d" % a.hold, "nodes=" + nodes, "users=nobody", "flags=ignore_jobs"])
    progress("reservation of %s from %d s from now (time_min %d min, the plan took %.1f s)" % (
        nodes, resv_start - time.time(), time_min, plan_s))
    jobs = {}
    moved = 0
    try:
        # what the planner expects now that the hole is there (docs/models.md, "Starting in a hole")
        planned = kv(run([os.environ.get("TULA", "tula"), "plan", "--script", script, "--time-min", "yes",
                          "--format", "kv"]))
        for variant, opt in (("time_min", "yes"), ("no_time_min", "no")):
            out = os.path.join(work, "%s-%%j.out" % variant)
            submitted = time.time()
            line = run(["sbatch", "--parsable", "--tula=auto", "--tula-time-min=" + opt, "-o", out, script])
            jobs[variant] = (line.strip().split(";")[0], submitted, out)
            progress("%s: job %s" % (variant, jobs[variant][0]))
            if variant == "time_min":
                moved = keep_hole(a, jobs[variant][0], resv_start, progress)
                resv_start += moved
                hole += moved
        firsts = {}
        deadline = time.time() + a.timeout
        for variant, (j, submitted, _) in jobs.items():  # the first start of each
            while variant not in firsts and time.time() < deadline:
                f = job_fields(j)
                if f.get("JobState") not in (None, "PENDING"):
                    firsts[variant] = (slurm_time(f.get("StartTime")) or time.time()) - submitted
                    break
                if variant == "no_time_min" and time.time() > resv_start:
                    break  # it waits behind the reservation: its start is read at its end
                time.sleep(1)
        ends = wait_all([j for j, _, _ in jobs.values()], max(60, deadline - time.time()), progress)
    except BaseException:
        for j, _, _ in jobs.values():
            subprocess.run(["scancel", j], capture_output=True)
        raise
    finally:
        subprocess.run(["scontrol", "delete", "reservation=" + a.reservation], capture_output=True)
    result = {"plan": {k: planned.get(k) for k in ("hole", "hole_parts", "rest_parts", "queue", "predicted_seconds")},
              "time_min_minutes": time_min, "hole_seconds": hole, "reservation_minutes": a.hold,
              "reservation_moved_seconds": moved,
              "partition": a.partition, "trainer_args": a.trainer_args}
    for variant, (j, submitted, out) in jobs.items():
        f = ends[j]
        end = slurm_time(f.get("EndTime")) or time.time()
        restarts = int(f.get("Restarts", "0") or 0)
        first = firsts.get(variant)
        if first is None:
            first = (slurm_time(f.get("StartTime")) or end) - submitted
        result[variant] = {"job": int(j), "state": f.get("JobState", "GONE"),
                           "time_to_result_seconds": round(end - submitted, 1),
                           "first_start_seconds": round(max(0.0, first), 1), "parts": restarts + 1,
                           "test_accuracy": accuracy_of(out.replace("%j", j)), "host": f.get("BatchHost"),
                           "time_min_seconds": slurm_seconds(f.get("TimeMin")),
                           "time_limit_seconds": slurm_seconds(f.get("TimeLimit"))}
    return result


def markdown(r):
    """The result as the eval report's section: a sentence and a table (markdown)."""
    rows = [("with `--tula-time-min=yes`", r["time_min"]), ("without (`--tula-time-min=no`)", r["no_time_min"])]
    head = ("Another user's reservation takes every node of partition %s from %d s after submission "
            "(the plan's time_min of %d min plus %d s) for %d min; the same job (`tula-train %s`) is "
            "submitted with and without time_min. Time to result: the last part's end minus the "
            "submission.\n\n" % (r["partition"], r["hole_seconds"], r["time_min_minutes"],
                                   r["hole_seconds"] - 60 * r["time_min_minutes"], r["reservation_minutes"],
                                   r["trainer_args"]))
    if r.get("plan", {}).get("hole"):
        head += "The plan with the hole there (`tula plan --time-min yes`): %s.\n\n" % r["plan"]["hole"]
    lines = ["| job | first start (s) | parts | time to result (s) | final test acc. | state |",
             "| --- | ---: | ---: | ---: | ---: | --- |"]
    for name, v in rows:
        acc = "n/a" if v["test_accuracy"] is None else "%.4f" % v["test_accuracy"]
        lines.append("| %s | %.0f | %d | %.0f | %s | %s |" % (name, v["first_start_seconds"], v["parts"],
                                                          v["time_to_result_seconds"], acc, v["state"]))
    a, b = r["time_min"]["time_to_result_seconds"], r["no_time_min"]["time_to_result_seconds"]
    tail = "\n\nWith time_min the result comes %.0f s %s (%.0f %% of the time without it)." % (
        abs(b - a), "earlier" if a < b else "later", 100.0 * a / b if b > 0 else float("nan"))
    return head + "\n".join(lines) + tail


def main(argv=None):
    p = argparse.ArgumentParser(prog="python3 -m experiments.hole", description=__doc__.split("\n\n")[0])
    p.add_argument("--workdir", required=True, help="directory for the job script, outputs and databases")
    p.add_argument("--trainer-args", required=True, help="tula-train's arguments (model, data, epochs, seed)")
    p.add_argument("--partition", default="cpu", help="the partition the reservation takes (default cpu)")
    p.add_argument("--lead", type=int, default=20, help="seconds of hole beyond time_min (default 20)")
    p.add_argument("--hold", type=int, default=2, help="minutes the reservation holds the nodes (default 2)")
    p.add_argument("--reservation", default="tula-hole", help="the reservation's name")
    p.add_argument("--timeout", type=int, default=900, help="seconds to wait for both jobs (default 900)")
    p.add_argument("--out", help="also write the JSON result to this file")
    p.add_argument("--markdown-from", metavar="JSON", help="print the markdown section of a result written "
                   "by --out, and run nothing")
    if argv is None:
        argv = sys.argv[1:]
    if "--markdown-from" in argv:
        a = p.parse_args(["--workdir", ".", "--trainer-args", ""] + argv)
        try:
            with open(a.markdown_from) as f:
                print(markdown(json.load(f)))
        except (OSError, ValueError, KeyError, TypeError) as e:
            print("tula: hole: cannot read the result %s: %s" % (a.markdown_from, e), file=sys.stderr)
            return 1
        return 0
    a = p.parse_args(argv)

    def progress(msg):
        print("hole: %s" % msg, file=sys.stderr, flush=True)

    try:
        result = scenario(a, progress)
    except ScenarioError as e:
        print("tula: hole: %s" % e, file=sys.stderr)
        return 1
    text = json.dumps(result, indent=1, sort_keys=True)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
