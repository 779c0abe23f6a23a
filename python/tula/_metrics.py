"""The metrics file a job writes (tula-jobs(7)): JSON lines, a "run" header, then "step",
"epoch" and "profile" lines and, as each part closes, a "summary" line, each flushed as it is
written so that a killed job keeps them.
Every value is checked as `tula db record --metrics` and `tula profile compute --command`
check it when they read the file, so that a bad value fails in the trainer, where it arose."""

import json
import math
import numbers
import os
from typing import Optional

from ._env import check_workload, env_int

LINE_MAX = 64 * 1024  # bytes of one line, its '\n' included

# The optional header fields the reader checks, and what each must be.
_HEADER_INTS = {"epochs": 1, "train_examples": 1, "test_examples": 1, "params": 1, "dataset_train_examples": 1,
                "dataset_test_examples": 1, "resumed_at_step": 0}
_HEADER_STRINGS = ("optimizer", "job_id", "hardware_class")


def default_path(env=None) -> str:
    """$TULA_METRICS, else tula-metrics-$SLURM_JOB_ID.jsonl (tula-metrics.jsonl outside Slurm)."""
    env = os.environ if env is None else env
    if env.get("TULA_METRICS"):
        return env["TULA_METRICS"]
    job = env.get("SLURM_JOB_ID", "")
    return "tula-metrics-%s.jsonl" % job if job else "tula-metrics.jsonl"


def _is_int(v):
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _is_real(v):
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


class Metrics:
    """Writes one metrics file. The header line is written when it is opened:

        with tula.Metrics(workload="fmnist-cnn@fashion-mnist", nodes=2, ranks=2,
                          global_batch=128, epochs=3) as m:
            m.step(0, 0.051, 128)
            m.epoch(1, 20.4, 0.861, train_loss=0.41)

    PATH None: default_path(). A "%r" in the path is replaced by RANK (default: SLURM_PROCID,
    else RANK, else 0). RESUME=True appends to an existing file (a resumed job): the new
    header says "resumed": true (and RESUMED_AT_STEP when given), must agree with the file's
    first header, and the epochs continue after the file's last epoch line. GLOBAL_BATCH None
    (or 0): a file of "profile" lines only. Further keywords are header fields ("epochs",
    "train_examples", "test_examples", "params", "optimizer", "predicted_seconds",
    "hardware_class", or any other JSON value); "job_id" defaults to $SLURM_JOB_ID. close()
    (the end of the with block) writes a "summary" line with the run's parts and part_seconds
    (part_seconds()). A value the reader would refuse raises ValueError."""

    def __init__(self, path: Optional[str] = None, *, workload: str, nodes: int, ranks: int,
                 global_batch: Optional[int], resume: bool = False, resumed_at_step: Optional[int] = None,
                 rank: Optional[int] = None, **header):
        self._file = None
        path = default_path() if path is None else os.fspath(path)
        if "%r" in path:
            if rank is None:
                rank = env_int(os.environ, "SLURM_PROCID", 0, "Slurm's rank of this task")
                if rank is None:
                    rank = env_int(os.environ, "RANK", 0, "the rank of this process") or 0
            path = path.replace("%r", str(rank))
        self.path = path
        check_workload(workload)
        self._need_int("nodes", nodes, 1)
        self._need_int("ranks", ranks, 1)
        if ranks < nodes or ranks % nodes:
            raise ValueError("tula: metrics %s: ranks %d is not a multiple of nodes %d (ranks per node = "
                             "ranks / nodes)" % (path, ranks, nodes))
        if global_batch is None or global_batch == 0:
            global_batch = None
        else:
            self._need_int("global_batch", global_batch, 1)
        head = {"type": "run", "workload": workload, "nodes": int(nodes), "ranks": int(ranks)}
        if global_batch is not None:
            head["global_batch"] = int(global_batch)
        if "job_id" not in header and os.environ.get("SLURM_JOB_ID"):
            header["job_id"] = os.environ["SLURM_JOB_ID"]
        if resume:
            header["resumed"] = True
            if resumed_at_step is not None:
                header["resumed_at_step"] = resumed_at_step
        elif resumed_at_step is not None:
            raise ValueError("tula: metrics %s: resumed_at_step is for a resumed run (resume=True)" % path)
        for key, value in header.items():
            if value is None:
                continue  # an optional field not known
            if key in _HEADER_INTS:
                self._need_int(key, value, _HEADER_INTS[key])
                value = int(value)
            elif key in _HEADER_STRINGS:
                if not isinstance(value, str):
                    raise ValueError("tula: metrics %s: %s %r is not a string" % (path, key, value))
            elif key == "predicted_seconds":
                self._need_real(key, value, 0, inclusive=True)
                value = float(value)
            elif key == "resumed":
                if not isinstance(value, bool):
                    raise ValueError("tula: metrics %s: resumed %r is not true or false" % (path, value))
            elif key in ("type", "workload", "nodes", "ranks", "global_batch"):
                raise ValueError("tula: metrics %s: header field %r is given twice" % (path, key))
            head[key] = value
        self.global_batch = global_batch
        # resumed_at_step counts the steps done before the resume: with steps numbered from 0
        # it is the next step's number (tula-jobs(7))
        self._last_step = head.get("resumed_at_step", 0) - 1
        self._last_epoch = 0
        # training seconds of the parts before this one (the file's earlier headers), and of this
        # part: its step lines' seconds, else (no step line) its epoch lines' seconds
        self._earlier_parts = []
        self._step_seconds = 0.0
        self._epoch_seconds = 0.0
        if resume and os.path.exists(path):
            self._continue(path, head)
        line = self._encode(head)
        self._file = open(path, "ab" if resume else "wb")
        self._put(line)

    # ---- the lines ----
    def step(self, step: int, seconds: float, examples: int) -> None:
        """One training step: its number (>= 0, increasing), wall seconds (> 0), examples over all ranks."""
        self._need_run("step")
        self._need_int("step", step, 0)
        if step <= self._last_step:
            raise ValueError("tula: metrics %s: step %d is not after step %d" % (self.path, step, self._last_step))
        self._need_real("step seconds", seconds, 0)
        self._need_int("step examples", examples, 1)
        self._write({"type": "step", "step": int(step), "seconds": float(seconds), "examples": int(examples)})
        self._last_step = int(step)
        self._step_seconds += float(seconds)

    def epoch(self, epoch: int, seconds: float, test_accuracy: float, **optional) -> None:
        """One finished epoch: its number (1, 2, ... consecutive), its training seconds without
        evaluation (> 0) and the test accuracy after it ([0, 1]). OPTIONAL: train_loss (>= 0),
        noise_scale (> 0), noise_observations (int >= 0), any other JSON value; a non-finite
        number there (NaN: not measured) is written as null."""
        self._need_run("epoch")
        self._need_int("epoch", epoch, 1)
        if epoch != self._last_epoch + 1:
            raise ValueError("tula: metrics %s: epoch %d does not follow epoch %d (epochs are 1, 2, 3, ...)"
                             % (self.path, epoch, self._last_epoch))
        self._need_real("epoch seconds", seconds, 0)
        self._need_real("test_accuracy", test_accuracy, 0, inclusive=True)
        if test_accuracy > 1:
            raise ValueError("tula: metrics %s: test_accuracy %r is not in [0, 1]" % (self.path, test_accuracy))
        obj = {"type": "epoch", "epoch": int(epoch), "seconds": float(seconds), "test_accuracy": float(test_accuracy)}
        for key, value in optional.items():
            if key in obj or key == "type":
                raise ValueError("tula: metrics %s: epoch field %r is given twice" % (self.path, key))
            if _is_real(value) and not _is_int(value) and not math.isfinite(value):
                value = None
            if key == "train_loss" and value is not None:
                self._need_real(key, value, 0, inclusive=True)
                value = float(value)
            elif key == "noise_scale" and value is not None:
                self._need_real(key, value, 0)
                value = float(value)
            elif key == "noise_observations":
                self._need_int(key, value, 0)
                value = int(value)
            obj[key] = value
        self._write(obj)
        self._last_epoch = int(epoch)
        self._epoch_seconds += float(seconds)

    def profile(self, local_batch: int, seconds: float, steps: int, *,
                startup_seconds: Optional[float] = None) -> None:
        """The median SECONDS of one training step (forward, backward, update; no allreduce) at
        LOCAL_BATCH over STEPS timed steps; STARTUP_SECONDS (finite >= 0, written only when
        given): the seconds the warm-up steps at that batch took beyond as many steady steps."""
        self._need_int("local_batch", local_batch, 1)
        self._need_real("profile seconds", seconds, 0)
        self._need_int("profile steps", steps, 1)
        line = {"type": "profile", "local_batch": int(local_batch), "seconds": float(seconds), "steps": int(steps)}
        if startup_seconds is not None:
            self._need_real("profile startup_seconds", startup_seconds, 0, inclusive=True)
            line["startup_seconds"] = float(startup_seconds)
        self._write(line)

    def part_seconds(self) -> list:
        """The training seconds of each part of the run so far, in order, this process's last: a
        part is one process's stretch of the file (the first header, or a resume's, to the next);
        its seconds are the sum of its step lines' seconds, or of its epoch lines' where it wrote
        no step line."""
        return self._earlier_parts + [self._step_seconds or self._epoch_seconds]

    def close(self) -> None:
        """Writes the "summary" line (the run's "parts" and their "part_seconds", as tula-train's
        summary has them) when this is a run file, and closes it. A process killed before close()
        leaves no summary of its part: the reader then counts the headers."""
        if self._file is not None:
            try:
                if self.global_batch is not None:
                    parts = self.part_seconds()
                    self._write({"type": "summary", "parts": len(parts), "part_seconds": parts})
            finally:
                self._file.close()
                self._file = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        self.close()

    # ---- helpers ----
    def _need_run(self, what):
        if self.global_batch is None:
            raise ValueError("tula: metrics %s: a %s line needs a global_batch in the header (this file was "
                             "opened for profile lines only)" % (self.path, what))

    def _need_int(self, what, value, minimum):
        if not _is_int(value) or value < minimum:
            raise ValueError("tula: metrics %s: %s %r is not a whole number >= %d"
                             % (getattr(self, "path", "?"), what, value, minimum))

    def _need_real(self, what, value, bound, inclusive=False):
        ok = _is_real(value) and math.isfinite(value) and (value >= bound if inclusive else value > bound)
        if not ok:
            raise ValueError("tula: metrics %s: %s %r is not a finite number %s %g"
                             % (self.path, what, value, ">=" if inclusive else ">", bound))

    def _encode(self, obj) -> bytes:
        try:
            text = json.dumps(obj, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as e:
            raise ValueError("tula: metrics %s: a %s line is not JSON: %s" % (self.path, obj.get("type"), e)) from None
        line = (text + "\n").encode("utf-8")
        if len(line) > LINE_MAX:
            raise ValueError("tula: metrics %s: a %s line of %d bytes is longer than %d"
                             % (self.path, obj.get("type"), len(line), LINE_MAX))
        return line

    def _write(self, obj):
        self._put(self._encode(obj))

    def _put(self, line):
        if self._file is None:
            raise ValueError("tula: metrics %s is closed" % self.path)
        self._file.write(line)
        self._file.flush()

    def _continue(self, path, head):
        """Resume: the existing file's first header must name the same run; the epochs and
        steps continue after its last ones."""
        with open(path, "rb") as f:
            data = f.read()
        if data and not data.endswith(b"\n"):  # a line the kill cut short: dropped
            data = data[:data.rfind(b"\n") + 1]
            with open(path, "r+b") as f:
                f.truncate(len(data))
        lines = data.decode("utf-8", "replace").splitlines()
        first = None
        steps = epochs = 0.0  # seconds of the part being read
        for number, text in enumerate(lines, 1):
            try:
                obj = json.loads(text)
            except ValueError:
                continue  # a line cut short by the kill
            if not isinstance(obj, dict):
                continue
            if obj.get("type") == "run" and first is not None:  # a later part begins
                self._earlier_parts.append(steps or epochs)
                steps = epochs = 0.0
            if obj.get("type") in ("step", "epoch") and _is_real(obj.get("seconds")):
                if obj["type"] == "step":
                    steps += obj["seconds"]
                else:
                    epochs += obj["seconds"]
            if first is None and obj.get("type") == "run":
                first = obj
                for key in ("workload", "nodes", "ranks", "global_batch"):
                    if obj.get(key) != head.get(key):
                        raise ValueError("tula: metrics %s:%d: the run resumed has %s %r, not %r"
                                         % (path, number, key, obj.get(key), head.get(key)))
            elif obj.get("type") == "epoch" and _is_int(obj.get("epoch")):
                self._last_epoch = obj["epoch"]
            elif obj.get("type") == "step" and _is_int(obj.get("step")) and "resumed_at_step" not in head:
                self._last_step = max(self._last_step, obj["step"])
        if first is not None:
            self._earlier_parts.append(steps or epochs)
