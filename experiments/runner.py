"""A pool of trainings whose results are rows of a study's runs.jsonl (experiments/rows.py).

Each Run is a tula-train command (or a chain of them) with the key of its row; the pool keeps
at most N of them in flight, each a child process of its own process group with its output
captured, and writes a finished run's row into runs.jsonl at once (the whole file written aside
and renamed over it, so that the file is never half written). A run whose row is complete (the
trainer's summary, or its divergence message) is not run again; a row of a failed run is
replaced by its next run, and a run stopped before its end leaves no row, so it is trained again.

SIGTERM and SIGINT stop the runs in flight (SIGTERM to each one's process group, SIGKILL after a
grace period), write nothing more and raise Stopped, which a command turns into its `tula:` line
and exit status."""
import json
import os
import shlex
import signal
import subprocess
import tempfile
import time

from experiments import rows as rows_mod
from experiments import testbed as tb

# seconds a stopped run's processes get between SIGTERM and SIGKILL
GRACE = 10


class Stopped(Exception):
    """The pool was stopped by a signal (its number is .signum)."""

    def __init__(self, signum):
        super().__init__("stopped by %s" % signal.Signals(signum).name)
        self.signum = signum


def complete(row):
    """The row is a run's final result: it ended with the trainer's summary or diverged."""
    return bool(row.get("done")) or row.get("diverged") is not None


def diverged_line(output):
    """tula-train's divergence message in a run's output lines (without its "tula-train: "), or None."""
    for line in output:
        if line.startswith("tula-train: ") and "training diverged" in line:
            return line[len("tula-train: "):]
    return None


def option(args, name):
    """The value of an option in a command's words (`--name V` or `--name=V`), or None."""
    for i, w in enumerate(args):
        if w == name and i + 1 < len(args):
            return args[i + 1]
        if w.startswith(name + "="):
            return w.split("=", 1)[1]
    return None


def result_fields(args, output, summary_path):
    """The row fields of one finished tula-train command: accuracies and seconds from its
    summary file, done, diverged, device and host, the command and its output lines."""
    got = tb.run_summary(summary_path, complete=False)
    header, summary = got["run"], got["summary"]
    fields = {"val_accuracy": None, "test_accuracy": None, "train_seconds": None, "done": summary is not None,
              "diverged": diverged_line(output), "device": option(args, "--device") or "cpu",
              "host": (header or {}).get("host"), "command": shlex.join(args), "output": output}
    for k in ("val_accuracy", "test_accuracy", "train_seconds"):
        v = (summary or {}).get(k)
        fields[k] = v if isinstance(v, (int, float)) and not isinstance(v, bool) else None
    if header and header.get("steps_per_epoch") is not None:
        fields["steps_per_epoch"] = header["steps_per_epoch"]
    return fields


class Run:
    """One training: its row's identity (key fields, in row order), the trainer's command words
    (without --summary, which the pool adds) and extra row fields. blocked: a function giving,
    when the run is due, None or the reason it cannot start (its row then has that reason as its
    output and is not complete)."""

    def __init__(self, key, args, extra=None, blocked=None, force=False):
        self.force = force  # run even when its row is complete
        self.key = dict(key)
        self.args = list(args)
        self.extra = dict(extra or {})
        self.blocked = blocked or (lambda: None)

    def ident(self):
        return tuple(sorted((k, str(v)) for k, v in self.key.items()))

    def label(self):
        return " ".join(str(v) for v in self.key.values() if v is not None)


class Chain:
    """Runs that go one after another in one place of the pool (a trunk and its branches); after:
    called once the chain has ended, stopped or not."""

    def __init__(self, runs, after=None):
        self.runs = list(runs)
        self.after = after or (lambda: None)


class Table:
    """A study's runs.jsonl: its rows by key (the fields named by key_fields), written whole on
    every change."""

    def __init__(self, path, key_fields):
        self.path = path
        self.key_fields = tuple(key_fields)
        self.rows = rows_mod.read_rows(path) if os.path.exists(path) else []
        self._index = None

    def ident(self, row):
        return tuple(sorted((k, str(row.get(k))) for k in self.key_fields))

    def find(self, run):
        """The row of a run, or None."""
        if self._index is None:
            self._index = {self.ident(r): r for r in self.rows}
        return self._index.get(run.ident())

    def put(self, row):
        """Adds the row, replacing the one with its key."""
        want = self.ident(row)
        self.rows = [r for r in self.rows if self.ident(r) != want] + [row]
        self._index = None
        self.save()

    def save(self):
        folder = os.path.dirname(self.path) or "."
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".runs-", suffix=".tmp", dir=folder)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                for r in self.rows:
                    f.write(rows_mod.row_line(r))
            os.replace(tmp, self.path)
        except BaseException:
            if os.path.exists(tmp):
                os.remove(tmp)
            raise


class Pool:
    """Runs Runs, jobs at a time, into a Table. base: the row fields every row starts with
    (study, subset, git_commit, binary_sha256 ...); say: the progress printer; work: the folder
    of the runs' summary files while they run (default: the system's temporary folder)."""

    def __init__(self, table, jobs, base, say, work=None):
        self.table = table
        self.jobs = jobs
        self.base = dict(base)
        self.say = say
        self.work = work or tempfile.gettempdir()
        self.done = 0
        self.total = 0
        self.failed = 0

    def todo(self, runs):
        """The runs without a complete row, each once."""
        out, seen = [], set()
        for r in runs:
            row = self.table.find(r)
            if (r.force or row is None or not complete(row)) and r.ident() not in seen:
                seen.add(r.ident())
                out.append(r)
        return out

    def _row(self, run, output):
        row = {k: None for k in rows_mod.FIELDS}
        row.update(self.base)
        row.update(run.key)
        row.update(done=False, command=shlex.join(run.args), output=output)
        return row

    def _spawn(self, run):
        """The job of a run started, or None when it is blocked (its row is written at once)."""
        why = run.blocked()
        if why is not None:
            row = self._row(run, [why])
            row.update(run.extra)
            self._record(run, row, None, 0.0)
            return None
        os.makedirs(self.work, exist_ok=True)
        fd, summary = tempfile.mkstemp(prefix="summary-", suffix=".json", dir=self.work)
        os.close(fd)
        os.remove(summary)
        out = tempfile.TemporaryFile(mode="w+b")
        proc = subprocess.Popen(run.args + ["--summary", summary], stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
        return {"run": run, "proc": proc, "out": out, "summary": summary, "t0": time.monotonic()}

    def _finish(self, job):
        job["out"].seek(0)
        output = job["out"].read().decode("utf-8", errors="replace").split("\n")
        job["out"].close()
        if output[-1] == "":
            output.pop()
        run = job["run"]
        row = self._row(run, output)
        row.update(result_fields(run.args, output, job["summary"]))
        row.update(run.extra)
        if os.path.exists(job["summary"]):
            os.remove(job["summary"])
        self._record(run, row, job["proc"].returncode, time.monotonic() - job["t0"])

    def _record(self, run, row, rc, seconds):
        self.table.put(row)
        self.done += 1
        if row["done"]:
            what = "val %s test %s" % (_acc(row["val_accuracy"]), _acc(row["test_accuracy"]))
        elif row["diverged"]:
            what = "diverged"
        else:
            self.failed += 1
            last = row["output"][-1] if row["output"] else "no output"
            what = "failed: %s" % last if rc is None else "failed (exit %d): %s" % (rc, last)
        self.say("[%d/%d] %s: %s (%d s)" % (self.done, self.total, run.label(), what, seconds))

    def run_all(self, runs):
        """Runs the runs that need it (todo), jobs at a time. Errors: Stopped."""
        self.run_chains([Chain([r]) for r in self.todo(runs)])

    def run_chains(self, chains):
        """Runs the chains, jobs at a time, each chain's runs that need it one after another.
        Errors: Stopped (the runs in flight are stopped and leave no row)."""
        queue = [(c, self.todo(c.runs)) for c in chains]
        self.total = max(self.total, self.done + sum(len(q[1]) for q in queue))
        flight = []  # [chain, its runs left, the job in flight or None]
        with _signals() as stop:
            try:
                while (queue or flight) and not stop:
                    while queue and len(flight) < self.jobs:
                        flight.append(list(queue.pop(0)) + [None])
                    for place in list(flight):
                        self._step(place, flight)
                    time.sleep(0.05)
            finally:
                _stop_all([p[2] for p in flight if p[2]])
                for place in flight:
                    place[0].after()
            if stop:
                raise Stopped(stop[0])

    def _step(self, place, flight):
        """Moves a chain on: reaps its job when it has ended, starts its next run, or ends it."""
        chain, left, job = place
        if job is not None:
            if job["proc"].poll() is None:
                return
            place[2] = None
            self._finish(job)
        while left and place[2] is None:
            place[2] = self._spawn(left.pop(0))
        if place[2] is None and not left:
            flight.remove(place)
            chain.after()


def _acc(x):
    return "-" if x is None else "%.4f" % x


def _stop_all(jobs):
    """Stops the jobs' process groups (SIGTERM, then SIGKILL after GRACE seconds) and drops their files."""
    for job in jobs:
        if job["proc"].poll() is None:
            _kill_group(job["proc"], signal.SIGTERM)
    end = time.monotonic() + GRACE
    for job in jobs:
        try:
            job["proc"].wait(timeout=max(0.0, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            _kill_group(job["proc"], signal.SIGKILL)
            job["proc"].wait()
        job["out"].close()
        for f in (job["summary"], job["summary"] + ".tmp"):
            if os.path.exists(f):
                os.remove(f)


def _kill_group(proc, sig):
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


class _signals:
    """Within the block, SIGTERM and SIGINT append their number to the list it gives instead of
    ending the process; the handlers before it come back after it."""

    def __enter__(self):
        self.got = []
        self.old = {s: signal.signal(s, lambda n, _f: self.got.append(n)) for s in (signal.SIGTERM, signal.SIGINT)}
        return self.got

    def __exit__(self, *exc):
        for s, h in self.old.items():
            signal.signal(s, h)
        return False
