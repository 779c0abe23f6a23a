"""Surviving the wall clock (tula-jobs(7), TIME LIMIT, CHECKPOINT AND REQUEUE): a trainer stops
before its job's time limit, on SIGUSR1 (sbatch --signal=USR1@S), on SIGTERM, or when the time
left falls below the stop reserve, saves its state atomically, asks Slurm to requeue the job,
and resumes from the checkpoint when the job starts again. Standard library only; with
torch.distributed set up, the ranks agree through an all_reduce."""

import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from typing import Callable, List, Mapping, Optional, Sequence

from ._env import env_int

STOP_EXIT_STATUS = 3        # the exit status of a process that stopped with a checkpoint (as tula-train)
# The fixed part of the stop reserve, seconds; a copy (Python does not link libtula) of
# kStopMarginSeconds in libtula/include/tula/stop.hpp, which tests/python/test_requeue.py compares.
STOP_MARGIN_SECONDS = 30.0
SQUEUE_TIMEOUT_SECONDS = 10.0
SCONTROL_TIMEOUT_SECONDS = 30.0

# Slurm's durations: [D-]H[:M[:S]] with a day, else M, M:S or H:M:S.
_DURATION_RE = re.compile(r"(?:(\d+)-(\d+)(?::(\d+)(?::(\d+))?)?|(\d+)(?::(\d+)(?::(\d+))?)?)\Z")
_NO_DEADLINE = ("UNLIMITED", "NOT_SET", "INVALID", "INFINITE")


def parse_slurm_duration(text: str) -> Optional[int]:
    """Seconds of a Slurm duration as squeue and sacct write it: "MM:SS", "HH:MM:SS",
    "D-HH:MM:SS", and the other forms Slurm reads ("M" minutes, "D-HH", "D-HH:MM"); the
    leading field may be any size, the others are below 24 (hours after a day) or 60.
    "UNLIMITED", "NOT_SET", "INVALID" (and "INFINITE"): None, no deadline. Anything else
    (empty, signs, fractions, a field out of range) raises ValueError. Python's counterpart
    (it cannot link libtula) of tula_parse_duration in libtula/src/names.c, laxer in what it reads."""
    if not isinstance(text, str):
        raise ValueError("tula: Slurm duration %r is not a string" % (text,))
    s = text.strip()
    if s.upper() in _NO_DEADLINE:
        return None
    m = _DURATION_RE.match(s) if s.isascii() else None
    if not m:
        raise ValueError("tula: %r is not a Slurm duration (MM:SS, HH:MM:SS or D-HH:MM:SS)" % text)
    d, dh, dm, ds, a, b, c = m.groups()
    if d is not None:
        days, hours, minutes, seconds = int(d), int(dh), int(dm or 0), int(ds or 0)
        if hours >= 24:
            raise ValueError("tula: %r is not a Slurm duration (hours after the day are below 24)" % text)
    elif c is not None:
        days, hours, minutes, seconds = 0, int(a), int(b), int(c)
    elif b is not None:
        days, hours, minutes, seconds = 0, 0, int(a), int(b)
    else:
        days, hours, minutes, seconds = 0, 0, int(a), 0
    later = [x for x in (dm, ds) if x is not None] if d is not None else [x for x in (b, c) if x is not None]
    if any(int(x) >= 60 for x in later):
        raise ValueError("tula: %r is not a Slurm duration (minutes and seconds are below 60)" % text)
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def stop_reserve_seconds(step_seconds: float, checkpoint_seconds: float) -> float:
    """The time a trainer keeps in hand before its job's end, in seconds: the same rule as
    libtula's tula::stop_reserve_seconds (docs/models.md, "Stop before the time limit"):

        reserve = 30 + 2 * step_seconds + checkpoint_seconds

    STEP_SECONDS: the longest step seen so far in this part of the job; CHECKPOINT_SECONDS:
    how long the last save took (before any save: an estimate, else 0). The trainer stops
    when now + reserve >= the job's end time. A value that is not a finite number >= 0
    raises ValueError."""
    for name, value in (("step_seconds", step_seconds), ("checkpoint_seconds", checkpoint_seconds)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise ValueError("tula: stop_reserve_seconds(): %s=%r is not a finite number >= 0" % (name, value))
    return STOP_MARGIN_SECONDS + 2.0 * step_seconds + checkpoint_seconds


def run_command(argv: Sequence[str], timeout: float) -> subprocess.CompletedProcess:
    """Runs ARGV with no input, its output captured as text, killed after TIMEOUT seconds.
    Raises subprocess.TimeoutExpired or OSError (e.g. the program is not installed)."""
    return subprocess.run(list(argv), stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)


def _last_line(text) -> str:
    """The last line of a command's output, stripped ("" when there is none)."""
    lines = (text or "").strip().splitlines()
    return lines[-1].strip() if lines else ""


def job_end_time(env: Optional[Mapping[str, str]] = None, clock: Callable[[], float] = time.time,
                 run: Callable = run_command):
    """(end, note): the Unix time in seconds at which the job's time limit falls, and None or
    a one-line message saying why it is not known. From SLURM_JOB_END_TIME when set, else from
    `squeue -h -j $SLURM_JOB_ID -o %L` (the time left, under a 10 s timeout: squeue keeps
    retrying for a minute when it finds no configuration) added to CLOCK(). Outside Slurm
    (no SLURM_JOB_ID): (None, None). A job without a limit, a failed or slow squeue, or
    output that is not a duration: (None, note). Never raises for what Slurm says; RUN is
    called as RUN(argv, timeout) and returns an object with returncode, stdout and stderr."""
    env = os.environ if env is None else env
    raw = (env.get("SLURM_JOB_END_TIME") or "").strip()
    if raw:
        try:
            end = float(raw)
        except ValueError:
            end = math.nan
        if math.isfinite(end) and end > 0:
            return end, None
        if raw.upper() not in _NO_DEADLINE and raw != "0":
            return None, "tula: SLURM_JOB_END_TIME=%r is not a Unix time; no deadline known" % raw
    job = (env.get("SLURM_JOB_ID") or "").strip()
    if not job:
        return None, None
    argv = ["squeue", "-h", "-j", job, "-o", "%L"]
    try:
        out = run(argv, SQUEUE_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        return None, "tula: squeue did not answer in %g s; no deadline known" % SQUEUE_TIMEOUT_SECONDS
    except OSError as e:
        return None, "tula: cannot run squeue (%s); no deadline known" % (e.strerror or e)
    if out.returncode != 0:
        return None, "tula: squeue failed (exit %d: %s); no deadline known" % (out.returncode, _last_line(out.stderr))
    text = _last_line(out.stdout)
    try:
        left = parse_slurm_duration(text)
    except ValueError:
        return None, "tula: squeue's time left %r is not a duration; no deadline known" % text
    if left is None:
        return None, None  # no time limit: nothing to stop for
    return clock() + left, None


def requeue_job(job_id: str, run: Callable = run_command) -> Optional[str]:
    """Asks Slurm to requeue job JOB_ID (`scontrol requeue JOB_ID`, 30 s timeout). Returns None
    when it did, else a one-line message starting "tula: " (slurmctld refuses a job submitted
    with --no-requeue, for one); never raises for scontrol's failures."""
    argv = ["scontrol", "requeue", str(job_id)]
    try:
        out = run(argv, SCONTROL_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        return "tula: scontrol requeue %s did not answer in %g s; the job is not requeued" % (job_id, SCONTROL_TIMEOUT_SECONDS)
    except OSError as e:
        return "tula: cannot run scontrol (%s); the job is not requeued" % (e.strerror or e)
    if out.returncode != 0:
        why = _last_line(out.stderr) or _last_line(out.stdout)
        return "tula: scontrol requeue %s failed (exit %d: %s); the job is not requeued" % (job_id, out.returncode, why)
    return None


def _fsync_dir(directory):
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _temp_prefix(path):
    return "." + os.path.basename(path) + "."


def atomic_save(save: Callable[[str], object], path: str, clock: Callable[[], float] = time.monotonic) -> float:
    """Writes the checkpoint PATH so that it is either the old file or the whole new one:
    SAVE(tmp) writes a temporary file in PATH's directory, which is fsynced, renamed over PATH,
    and the directory fsynced. Returns the seconds it took (CLOCK). When SAVE raises, or writes
    nothing (RuntimeError), the temporary file is removed, PATH is left as it was, and the
    error propagates; a process killed during the save leaves PATH as it was too."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    t0 = clock()
    fd, tmp = tempfile.mkstemp(prefix=_temp_prefix(path), suffix=".tmp", dir=directory)
    os.close(fd)
    try:
        save(tmp)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            if os.fstat(fd).st_size == 0:
                raise RuntimeError("tula: checkpoint %s: the save function wrote nothing to %s" % (path, tmp))
            os.fsync(fd)
        finally:
            os.close(fd)
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)  # the mode of a file the process creates, not mkstemp's 0600
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(directory)
    return clock() - t0


def _remove_stale_temps(path):
    """Removes temporary files a killed save left next to PATH."""
    directory = os.path.dirname(os.path.abspath(path))
    prefix = _temp_prefix(path)
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        if name.startswith(prefix) and name.endswith(".tmp"):
            try:
                os.unlink(os.path.join(directory, name))
            except OSError:
                pass


def torch_agree() -> Optional[Callable[[List[float]], List[float]]]:
    """The ranks' agreement when torch.distributed is set up with more than one process: a
    function that all_reduces a short list of floats with MAX (on the GPU under NCCL) and
    returns the result; None otherwise. It imports nothing: without torch loaded, None."""
    dist = sys.modules.get("torch.distributed")
    torch = sys.modules.get("torch")
    if dist is None or torch is None or not dist.is_available() or not dist.is_initialized():
        return None
    if dist.get_world_size() < 2:
        return None

    def agree(values):
        device = "cpu"
        if dist.get_backend() == "nccl":
            device = torch.device("cuda", torch.cuda.current_device())
        t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return [float(v) for v in t.tolist()]
    return agree


def _say(message):
    print(message, file=sys.stderr, flush=True)


class Requeue:
    """Checkpoint, stop before the time limit, requeue, resume:

        with tula.Requeue(save=lambda p: torch.save(state, p), load=lambda p: state.update(torch.load(p))) as rq:
            start = state["step"] if rq.resumed else 0
            for step in range(start, total):
                train_step()
                if rq.should_stop():
                    rq.stop(step + 1)        # saves, requeues when allowed, raises SystemExit(3)

    PATH: the checkpoint, default tula-ckpt-$SLURM_JOB_ID.pt in the working directory (outside
    Slurm it must be given: ValueError). A "%r" in it is replaced by the rank and every rank
    saves its own file; otherwise rank 0 alone saves and every rank loads the one file. On
    entry, when the checkpoint exists (a requeued job, SLURM_RESTART_COUNT > 0, or a rerun),
    LOAD(path) is called on every rank; `resumed` is then True, `resume_path` the path and
    `loaded` what LOAD returned. The deadline is read once on entry (job_end_time(), on rank
    0, shared). Entry installs handlers for SIGUSR1 and SIGTERM that only set a flag (so
    SIGTERM no longer ends the process by itself: call should_stop() often); exit restores
    the previous ones. Enter it in the main thread, after torch.distributed is set up.

    CHECKPOINT_SECONDS: the estimate of one save in seconds until the first save has been
    timed. REQUEUE=False: never run scontrol requeue. RANK: default torch.distributed's rank,
    else SLURM_PROCID, else RANK, else 0. AGREE: the ranks' agreement, a function that takes a
    list of floats and returns the elementwise maximum over the ranks (default torch_agree():
    all_reduce when torch.distributed is set up, else each rank decides alone). ENV, CLOCK
    (Unix seconds), RUN (run_command's signature) and SAY (one-line messages) are for tests.
    A malformed SLURM_RESTART_COUNT or SLURM_PROCID raises ValueError; LOAD's errors propagate."""

    def __init__(self, save: Callable[[str], object], load: Optional[Callable[[str], object]] = None,
                 path: Optional[str] = None, *, checkpoint_seconds: float = 0.0, requeue: bool = True,
                 rank: Optional[int] = None, agree: Optional[Callable[[List[float]], List[float]]] = None,
                 env: Optional[Mapping[str, str]] = None, clock: Callable[[], float] = time.time,
                 run: Callable = run_command, say: Callable[[str], None] = _say):
        if not callable(save) or (load is not None and not callable(load)):
            raise ValueError("tula: Requeue(): save (and load, when given) must be functions of the path")
        stop_reserve_seconds(0.0, checkpoint_seconds)  # checks it
        self._env = os.environ if env is None else env
        self._clock, self._run, self._say = clock, run, say
        self._save, self._load = save, load
        self._agree = agree
        self._requeue = requeue
        self.job_id = (self._env.get("SLURM_JOB_ID") or "").strip() or None
        self.restart_count = env_int(self._env, "SLURM_RESTART_COUNT", 0, "Slurm's restarts of this job") or 0
        self._rank = rank
        if path is None:
            if self.job_id is None:
                raise ValueError("tula: Requeue(): outside Slurm (no SLURM_JOB_ID) the checkpoint path must be given")
            path = "tula-ckpt-%s.pt" % self.job_id
        self._path_template = os.fspath(path)
        self.path = self._path_template
        self.checkpoint_seconds = float(checkpoint_seconds)  # the last save's seconds, else the estimate
        self.step_seconds = 0.0       # the longest step of this part, seconds
        self.end_time = None          # the job's end, Unix seconds; None: no deadline known
        self.resumed = False
        self.resume_path = None
        self.loaded = None
        self.reason = None            # why should_stop() said stop: "SIGUSR1", "SIGTERM", "time"
        self._flags = {signal.SIGUSR1: False, signal.SIGTERM: False}
        self._clock_stop = False
        self._old = {}
        self._last_check = None
        self._entered = False

    # ---- the context ----
    def __enter__(self):
        if self._agree is None:
            self._agree = torch_agree()
        if self._rank is None:
            self._rank = self._default_rank()
        self.rank = self._rank
        self.path = self._path_template.replace("%r", str(self.rank))
        self._saves = "%r" in self._path_template or self.rank == 0
        self._install()
        try:
            self._start()
        except BaseException:
            self._restore()
            raise
        self._entered = True
        return self

    def __exit__(self, *exc):
        self._restore()
        self._entered = False
        return False

    def _default_rank(self):
        dist = sys.modules.get("torch.distributed")
        if dist is not None and dist.is_available() and dist.is_initialized():
            return dist.get_rank()
        for name in ("SLURM_PROCID", "RANK"):
            value = env_int(self._env, name, 0, "the rank of this process")
            if value is not None:
                return value
        return 0

    def _install(self):
        for signum in self._flags:
            self._old[signum] = signal.signal(signum, self._on_signal)

    def _restore(self):
        for signum, old in self._old.items():
            signal.signal(signum, old if old is not None else signal.SIG_DFL)
        self._old = {}

    def _on_signal(self, signum, frame):
        self._flags[signum] = True

    def _agreed(self, values):
        return list(self._agree(values)) if self._agree is not None else list(values)

    def _start(self):
        """The deadline (rank 0 reads it, or every rank when there is no agreement) and the
        resume, agreed by all ranks in one exchange."""
        end, note = None, None
        if self.rank == 0 or self._agree is None:
            end, note = job_end_time(self._env, self._clock, self._run)
        if self._saves:
            _remove_stale_temps(self.path)
        exists = os.path.exists(self.path)
        agreed = self._agreed([end or 0.0, 1.0 if exists else 0.0, 0.0 if exists else 1.0])
        self.end_time = agreed[0] if agreed[0] > 0 else None
        if note and self.rank == 0:
            self._say(note)
        if agreed[1] > 0 and agreed[2] > 0:
            raise RuntimeError("tula: checkpoint %s is seen by some ranks and not by others (it must be on a file "
                               "system every rank sees)" % self.path)
        if exists:
            self.resumed = True
            self.resume_path = self.path
            if self.rank == 0:
                restart = " (restart %d of job %s)" % (self.restart_count, self.job_id) if self.restart_count else ""
                self._say("tula: resuming from checkpoint %s%s" % (self.path, restart))
            if self._load is not None:
                self.loaded = self._load(self.path)
        elif self.restart_count > 0 and self.rank == 0:
            self._say("tula: job %s restarted (SLURM_RESTART_COUNT=%d) without a checkpoint %s; starting afresh"
                      % (self.job_id, self.restart_count, self.path))

    # ---- the decision ----
    def reserve_seconds(self) -> float:
        """The stop reserve now, seconds: stop_reserve_seconds(longest step, last save)."""
        return stop_reserve_seconds(self.step_seconds, self.checkpoint_seconds)

    def should_stop(self, step_seconds: Optional[float] = None) -> bool:
        """Whether to stop after the step just finished; the same answer on every rank (one
        agreement a call). STEP_SECONDS: that step's wall seconds (None: the time since the
        previous call, nothing at the first). True after SIGUSR1 or SIGTERM on any rank, or
        when the clock reaches the end time less the stop reserve. A STEP_SECONDS that is not
        a finite number >= 0 raises ValueError."""
        if not self._entered:
            raise RuntimeError("tula: Requeue.should_stop() outside its `with` block")
        now = self._clock()
        if step_seconds is None and self._last_check is not None:
            step_seconds = max(0.0, now - self._last_check)
        self._last_check = now
        if step_seconds is not None:
            stop_reserve_seconds(step_seconds, 0.0)  # checks it
            self.step_seconds = max(self.step_seconds, float(step_seconds))
        clock_stop = self.end_time is not None and now + self.reserve_seconds() >= self.end_time
        usr1, term, clock_stop = self._agreed([float(self._flags[signal.SIGUSR1]), float(self._flags[signal.SIGTERM]),
                                               float(clock_stop)])
        self._clock_stop = clock_stop > 0
        self.reason = "SIGTERM" if term > 0 else "SIGUSR1" if usr1 > 0 else "time" if clock_stop > 0 else None
        return self.reason is not None

    def stop(self, step: Optional[int] = None):
        """Saves the checkpoint (atomic_save; rank 0, or every rank with "%r" in the path), waits
        for every rank's save, then on rank 0 under Slurm runs `scontrol requeue $SLURM_JOB_ID`
        when the stop came from SIGUSR1 or the clock and no rank got SIGTERM, and raises
        SystemExit(STOP_EXIT_STATUS), 3. A failed requeue is reported in one line and the
        process still exits 3. When a save fails, that rank's error propagates and the other
        ranks raise RuntimeError; nothing is requeued. STEP (optional) names the position in
        the messages."""
        if not self._entered:
            raise RuntimeError("tula: Requeue.stop() outside its `with` block")
        error = None
        if self._saves:
            try:
                self.checkpoint_seconds = atomic_save(self._save, self.path)
            except Exception as e:  # reported to the other ranks, then raised
                error = e
        failed, usr1, term, clock_stop = self._agreed([1.0 if error else 0.0, float(self._flags[signal.SIGUSR1]),
                                                       float(self._flags[signal.SIGTERM]), float(self._clock_stop)])
        if error is not None:
            self._say("tula: checkpoint %s not saved (%s); the job is not requeued" % (self.path, error))
            raise error
        if failed > 0:
            raise RuntimeError("tula: another rank could not save its checkpoint; the job is not requeued")
        why = "SIGTERM" if term > 0 else "SIGUSR1" if usr1 > 0 else "the time limit is near" if clock_stop > 0 else "asked"
        if self.rank == 0:
            at = " at step %s" % step if step is not None else ""
            self._say("tula: stopping%s (%s): checkpoint %s saved in %.1f s"
                      % (at, why, self.path, self.checkpoint_seconds))
            if (usr1 > 0 or clock_stop > 0) and term == 0 and self._requeue and self.job_id:
                problem = requeue_job(self.job_id, self._run)
                self._say(problem or "tula: job %s requeued; it resumes from %s" % (self.job_id, self.path))
        raise SystemExit(STOP_EXIT_STATUS)
