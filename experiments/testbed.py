"""What the reports measured on the isolated testbed (experiments.testbed_report,
experiments.first_run_report, experiments.ranks_report) share: progress lines, the commands they
run in a cluster of scripts/tula-cluster, the readers of tula's and tula-train's outputs, the
results folder (rows.py) and the markdown table."""
import datetime
import hashlib
import json
import os
import platform
import re
import subprocess
import sys
import time

from experiments import rows as rowsmod

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Progress:
    """Progress lines with the seconds since the start: step() a section, say() one line."""

    def __init__(self, name):
        self.name = name
        self.start = time.time()

    def seconds(self):
        return int(time.time() - self.start)

    def step(self, what):
        print("\n== %s (%ds)" % (what, self.seconds()), flush=True)

    def say(self, what):
        print("%s: %s (%ds)" % (self.name, what, self.seconds()), flush=True)


def warn(name, what):
    print("tula: %s: %s" % (name, what), file=sys.stderr, flush=True)


def die(name, what, code=1):
    warn(name, what)
    sys.exit(code)


# ---- commands ---------------------------------------------------------------------------------

def run(args, out=None, check=True, quiet=False):
    """Runs args; its output to the file out (else ours), its errors nowhere when quiet. Returns
    the exit status; with check, a failure raises subprocess.CalledProcessError."""
    stderr = subprocess.DEVNULL if quiet else None
    sys.stdout.flush()
    if out is None:
        rc = subprocess.call(args, stderr=stderr)
    else:
        with open(out, "w") as f:
            rc = subprocess.call(args, stdout=f, stderr=stderr)
    if check and rc != 0:
        raise subprocess.CalledProcessError(rc, args)
    return rc


def output(args):
    """The standard output of args, which must succeed."""
    sys.stdout.flush()
    return subprocess.run(args, stdout=subprocess.PIPE, check=True, universal_newlines=True).stdout


def stdout_of(args):
    """The standard output of args, whatever its exit status ("" where it cannot be run)."""
    sys.stdout.flush()
    try:
        return subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, universal_newlines=True).stdout
    except OSError:
        return ""


def inside(name, measure, *args):
    """Runs measure(*args) inside the cluster; a command that failed ends it with its status."""
    try:
        measure(*args)
    except subprocess.CalledProcessError as e:
        die(name, "%s failed (exit %s)" % (" ".join(map(str, e.cmd)), e.returncode))
    return 0


def one_cluster_main(name, module, doc, measure, write_report, argv=None, check=None):
    """The command of a report measured in one cluster: --results DIR (the rows' folder, default
    results/NAME), --out FILE (default report.md in the rows' folder), --from-rows
    (no cluster: the report from the rows); it runs itself with --inside in a cluster, where
    measure(results) writes the rows, then write_report(results, out). check() runs before the
    cluster is started."""
    import argparse
    ap = argparse.ArgumentParser(prog=module.split(".")[-1], description=doc.split("\n\n")[0])
    ap.add_argument("--results", default=os.environ.get("TULA_REPORT_RESULTS") or os.path.join(REPO, "results", name))
    ap.add_argument("--out")
    ap.add_argument("--from-rows", action="store_true")
    ap.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    results = os.path.abspath(a.results)
    if a.inside:
        return inside(name, measure, results)
    out = os.path.abspath(a.out or os.path.join(results, "report.md"))
    if not a.from_rows:
        if check:
            check()
        rc = cluster_run(module, ["--inside", "--results", results])
        if rc != 0:
            return rc
    write_report(results, out)
    return 0


def tee(args, path):
    """Runs args (which must succeed), its output both to ours and to the file path."""
    sys.stdout.flush()
    with open(path, "w") as f, subprocess.Popen(args, stdout=subprocess.PIPE, universal_newlines=True) as p:
        for line in p.stdout:
            sys.stdout.write(line)
            f.write(line)
    sys.stdout.flush()
    if p.returncode != 0:
        raise subprocess.CalledProcessError(p.returncode, args)


# The prefix that runs a command as one task on one node of the cluster.
ON_NODE = ["srun", "--quiet", "-N", "1", "-n", "1", "-t", "60"]


def on_node(args, **kw):
    """Runs args as one task on one node of the cluster."""
    return run(ON_NODE + list(args), **kw)


def submit(args):
    """The job id that `sbatch args` (with --parsable) printed."""
    return output(["sbatch"] + list(args)).strip().split(";")[0]


def sbatch_wait(options, wrap, out):
    """Submits the command line wrap as a batch job with options and waits for it; its output to
    out. True when the job succeeded."""
    return run(["sbatch", "--wait", "--quiet"] + list(options) + ["-o", out, "--wrap", wrap], check=False) == 0


def in_cluster(name):
    """Inside scripts/tula-cluster run: the cluster's directory, made the working directory.
    Exits with a SKIP line (status 77) where the cluster is not the isolated testbed."""
    d = os.environ.get("TULA_CLUSTER_DIR")
    if not d:
        die(name, "run through scripts/tula-cluster")
    if os.environ.get("TULA_TESTBED") != "isolated":
        print("SKIP %s: no isolated testbed here" % name, flush=True)
        sys.exit(77)
    os.chdir(d)
    return d


def cluster_run(module, args, env=None, keep=False):
    """Runs `python3 -m module args` in a cluster of its own (scripts/tula-cluster run; with keep,
    its directory is kept); the exit status."""
    e = dict(os.environ if env is None else env)
    e["PYTHONPATH"] = REPO + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    sys.stdout.flush()
    return subprocess.call([os.path.join(REPO, "scripts", "tula-cluster"), "run"] + (["--keep"] if keep else []) + ["--",
                           sys.executable, "-B", "-m", module] + list(args), env=e)


# ---- readers ----------------------------------------------------------------------------------

def read_text(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def read_json(path):
    """The JSON document in path, or None where there is none."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def kv(text):
    """The key=value lines of a `--format kv` output as a dict (a key's first line wins)."""
    out = {}
    for line in text.splitlines():
        k, sep, v = line.partition("=")
        if sep and k not in out:
            out[k] = v
    return out


def number(text):
    """text as an int or float, or None where it is neither."""
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return None


def last_epoch_seconds(metrics_path):
    """The seconds of the last epoch line of a tula-train --metrics file, or None."""
    secs = None
    for line in read_text(metrics_path).splitlines():
        try:
            o = json.loads(line)
        except ValueError:
            continue
        if isinstance(o, dict) and o.get("type") == "epoch":
            secs = o.get("seconds")
    return secs


def done_train_seconds(text):
    """train_seconds of tula-train's last done line in text, or None."""
    found = re.findall(r"^tula-train: done: train_seconds=([0-9.]+)", text, re.M)
    return float(found[-1]) if found else None


def predicted_seconds(doc):
    """predicted_seconds of a `tula predict --format json` document, or None."""
    try:
        return float(doc["predicted_seconds"])
    except (TypeError, KeyError, ValueError):
        return None


def validate_runs(doc):
    """The runs held out by `tula validate --format json`: dicts of workload, nodes,
    ranks_per_node, global_batch, measured_epoch_seconds and predicted_epoch_seconds."""
    out = []
    for w in (doc or {}).get("workloads", []):
        for p in w.get("held_out", []):
            if p.get("kind") == "run":
                out.append({"workload": w.get("workload"), "nodes": p["nodes"], "ranks_per_node": p["ranks_per_node"],
                            "global_batch": p["global_batch"], "measured_epoch_seconds": p["measured_epoch_seconds"],
                            "predicted_epoch_seconds": p["predicted_epoch_seconds"]})
    return out


def run_summary(path, complete=True):
    """The run file that tula-train --summary wrote (tula-jobs(7)) as {"run": its last header,
    "epochs": the epoch lines after it, "summary": its summary line}, or None where the file or
    its summary line is missing; with complete=False, the lines found so far instead of None
    (each None where missing)."""
    run, epochs, summary = None, [], None
    for line in read_text(path).splitlines():
        try:
            o = json.loads(line)
        except ValueError:
            continue
        if not isinstance(o, dict):
            continue
        if o.get("type") == "run":
            run, epochs, summary = o, [], None
        elif o.get("type") == "epoch":
            epochs.append(o)
        elif o.get("type") == "summary":
            summary = o
    if complete and (run is None or summary is None):
        return None
    return {"run": run, "epochs": epochs, "summary": summary}


_SPREAD = re.compile(r"^profile compute: round spread ([0-9.]+) %", re.M)


def round_spread(text):
    """The last round spread (percent) that `tula profile compute` printed, or None."""
    found = _SPREAD.findall(text)
    return float(found[-1]) if found else None


_SAMPLE = re.compile(r"profile allreduce: ([0-9]+) ranks, ([0-9]+) bytes: ([0-9.]+) ms")
_FIT = re.compile(r"fit \(([a-z]+).*alpha = ([0-9.]+) us per step, beta = ([0-9.]+) ns per byte")


def allreduce_samples(text):
    """The allreduce samples that tula-train --profile-allreduce printed: (ranks, bytes, ms)."""
    return [(int(k), int(n), float(ms)) for k, n, ms in _SAMPLE.findall(text)]


def allreduce_fit(text):
    """The last fit `tula profile allreduce` printed: (algorithm, alpha us, beta ns), or None."""
    found = _FIT.findall(text)
    return (found[-1][0], float(found[-1][1]), float(found[-1][2])) if found else None


# ---- results and reports ----------------------------------------------------------------------

def append_row(path, row):
    with open(path, "a", encoding="utf-8") as f:
        f.write(rowsmod.row_line(row))


def write_results(folder, rows, manifest):
    """Writes folder/runs.jsonl and folder/manifest.json."""
    rowsmod.write_rows(os.path.join(folder, "runs.jsonl"), rows)
    rowsmod.write_manifest(os.path.join(folder, "manifest.json"), manifest)


def read_results(folder, name=None):
    """(rows, manifest) of a results folder; with name, one that cannot be read ends the program
    with a message."""
    try:
        return (rowsmod.read_rows(os.path.join(folder, "runs.jsonl")),
                rowsmod.read_manifest(os.path.join(folder, "manifest.json")))
    except (OSError, ValueError) as e:
        if name is None:
            raise
        die(name, "no rows to report: %s" % e)


def file_sha256(path):
    """The SHA-256 of the file at path (hex), or None where it cannot be read."""
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    except (OSError, TypeError):
        return None
    return h.hexdigest()


def git_commit(path, short=False, dirty=False):
    """The commit checked out in the git repository around the folder path: its full hash, or its
    abbreviated one with short; with dirty, "-dirty" appended when git status shows changes under
    path. None where git cannot say (no git, no repository, no commit)."""
    try:
        head = subprocess.run(["git", "-C", path, "rev-parse"] + (["--short"] if short else []) + ["HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
        changed = dirty and subprocess.run(["git", "-C", path, "status", "--porcelain", "--", "."],
                                           capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return (head + ("-dirty" if changed else "")) if head else None


def provenance():
    """Where and when: made_at (UTC), uname (-srm), cores and the repository's git commit (its full
    hash, git_commit)."""
    return {"made_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "uname": "%s %s %s" % (platform.system(), platform.release(), platform.machine()),
            "cores": len(os.sched_getaffinity(0)), "git_commit": git_commit(REPO)}


def md_table(header, aligns, rows, compact=False):
    """A markdown table as lines: aligns holds "l" or "r" a column; compact writes the rule
    without spaces (|---:|)."""
    rule = [("---" if a == "l" else "---:") for a in aligns]
    line = (lambda cells: "|" + "|".join(cells) + "|") if compact else (lambda cells: "| " + " | ".join(cells) + " |")
    return ["| " + " | ".join(header) + " |", line(rule)] + ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]


def write_text(path, text):
    """Writes text to the file path (UTF-8, its folder made where missing), or to standard output
    when path is None or empty."""
    if not path:
        sys.stdout.write(text)
        return
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
