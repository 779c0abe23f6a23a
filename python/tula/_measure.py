"""The first job measures itself (tula-jobs(7), TULA_PROFILE): before training, a few steps at
local batches around the job's own are timed on a copy of the model and recorded as a compute
profile, so that the next submission of a workload nobody profiled can be planned. The same
rules as tula-train's (trainer/app/measure.cpp), start-up included: each local batch's
startup_seconds is the seconds its warm-up steps took beyond as many steady steps, as `tula
profile compute` records it."""

import math
import os
import shutil
import subprocess
import sys
import time
from typing import Callable, Dict, List, Mapping, Optional, Tuple

from ._metrics import Metrics
from ._requeue import job_end_time

MEASURE_SECONDS = 60.0  # TULA_PROFILE=1: the most seconds the measurement takes
MEASURE_SHARE = 0.02  # and at most this share of the job's time left
WARMUP_STEPS, TIMED_STEPS = 1, 3


def measure_budget(value: Optional[str], time_left: Optional[float]) -> Tuple[float, Optional[str]]:
    """(seconds, why): the budget of TULA_PROFILE=VALUE. "1" or "yes": MEASURE_SECONDS; seconds
    in (0, 3600]: those; at most MEASURE_SHARE x TIME_LEFT (seconds) when that is known. Unset,
    "", "0" or "no": (0, None). Anything else: (0, the one-line reason)."""
    if value is None or value.strip() in ("", "0", "no"):
        return 0.0, None
    v = value.strip()
    if v in ("1", "yes"):
        cap = MEASURE_SECONDS
    else:
        try:
            cap = float(v)
        except ValueError:
            cap = math.nan
        if not (math.isfinite(cap) and 0 < cap <= 3600):
            return 0.0, ("tula: TULA_PROFILE=%r is not 1, yes, 0, no or seconds in (0, 3600]; the step is not "
                         "measured" % v[:40])
    if time_left is not None and time_left > 0:
        cap = min(cap, MEASURE_SHARE * time_left)
    return cap, None


def measured_batches(local_batch: int) -> List[int]:
    """b/4, b/2, b and 2b (whole, at least 1), ascending, each once."""
    b = max(1, int(local_batch))
    return sorted({max(1, x) for x in (b // 4, b // 2, b, 2 * b)})


def _say(message):
    print(message, file=sys.stderr, flush=True)


def measure(step_fn: Callable, make_batch: Callable[[int], object], local_batch: int, *, workload: str,
            nodes: int, ranks: int, rank: int = 0, path: Optional[str] = None, record: bool = True,
            env: Optional[Mapping[str, str]] = None, clock: Callable[[], float] = time.perf_counter,
            **header) -> Dict[int, float]:
    """When TULA_PROFILE asks for it (measure_budget), times STEP_FN(MAKE_BATCH(b)) (one training
    step of a copy of the model: forward, backward, update, no allreduce; it must return when the
    work is done) WARMUP_STEPS + TIMED_STEPS times at each local batch of
    measured_batches(LOCAL_BATCH), as long as the next batch's estimate (the last step scaled by
    the batch) stays within the budget. Rank 0 writes the medians as "profile" lines of a
    metrics file for WORKLOAD on NODES x RANKS (PATH, default $TULA_METRICS with ".profile"
    before its suffix, else tula-profile-$SLURM_JOB_ID.jsonl; HEADER: params, train_examples, ...)
    and, with RECORD, records it with `tula db record --metrics` (the tula command on $PATH).
    Each line's startup_seconds is the seconds that batch's warm-up steps took beyond as many
    median steps (CLOCK; >= 0). A batch that fails (out of memory, an error) is skipped with
    one line on stderr; nothing here fails the job. Returns {b: median seconds} (empty when
    nothing was measured)."""
    env = os.environ if env is None else env
    raw = env.get("TULA_PROFILE")
    if raw is None or raw.strip() == "":
        return {}
    end, _ = job_end_time(env)
    budget, why = measure_budget(raw, end - time.time() if end is not None else None)
    if why:
        if rank == 0:
            _say(why)
        return {}
    if not budget > 0:
        return {}
    batches = measured_batches(local_batch)
    if rank == 0:
        _say("tula: measuring the step of %s before training (TULA_PROFILE, at most %.0f s): local batches %s, "
             "%d steps each, on a copy of the model" % (workload, budget, ", ".join(map(str, batches)), TIMED_STEPS))
    start = clock()
    result = {}
    startup = {}  # {b: seconds the warm-up steps took beyond as many steady steps}
    last = None
    for b in batches:
        spent = clock() - start
        estimate = (WARMUP_STEPS + TIMED_STEPS) * last[1] * b / last[0] if last else 0.0
        if spent + estimate > budget:
            if rank == 0:
                _say("tula: local batch %d not measured: it would pass the budget of %.0f s" % (b, budget))
            break
        try:
            data = make_batch(b)
            t0 = clock()
            for _ in range(WARMUP_STEPS):
                step_fn(data)
            warm = clock() - t0
            times = []
            for _ in range(TIMED_STEPS):
                t0 = clock()
                step_fn(data)
                times.append(clock() - t0)
        except (MemoryError, RuntimeError, ValueError) as e:  # torch's out of memory is a RuntimeError
            _say("tula: TULA_PROFILE: local batch %d not measured: %s" % (b, str(e).splitlines()[0][:200] if str(e) else
                                                                           type(e).__name__))
            continue
        times.sort()
        median = times[len(times) // 2]
        if not median > 0:
            continue
        result[b] = median
        last = (b, median)
        if math.isfinite(warm):
            startup[b] = max(0.0, warm - WARMUP_STEPS * median)
        if rank == 0:
            _say("tula: measured local batch %d: %.2f ms per step (%d steps%s)"
                 % (b, median * 1e3, TIMED_STEPS, ", start-up %.3f s" % startup[b] if b in startup else ""))
    if rank != 0 or not result:
        if rank == 0:
            _say("tula: TULA_PROFILE: no local batch could be measured; the job trains as asked")
        return result
    if path is None:
        base = env.get("TULA_METRICS") or ""
        stem, ext = os.path.splitext(base)
        path = stem + ".profile" + (ext or ".jsonl") if base else "tula-profile-%s.jsonl" % env.get("SLURM_JOB_ID", "local")
    with Metrics(path, workload=workload, nodes=nodes, ranks=ranks, global_batch=None, **header) as m:
        for b, s in result.items():
            m.profile(b, s, TIMED_STEPS, startup_seconds=startup.get(b))
    recorded = ""
    if record:
        tula = shutil.which("tula")
        if tula is None:
            recorded = "; not recorded: no tula command on $PATH (record it with tula db record --metrics %s)" % path
        else:
            try:
                out = subprocess.run([tula, "db", "record", "--metrics", path], capture_output=True, text=True,
                                     timeout=60)
                recorded = ", recorded" if out.returncode == 0 else \
                    "; not recorded (tula db record: %s)" % ((out.stderr or out.stdout).strip().splitlines() or ["?"])[-1]
            except (OSError, subprocess.TimeoutExpired) as e:
                recorded = "; not recorded (tula db record: %s)" % e
    _say("tula: measured %d local batch(es) in %.1f s into %s%s; training starts"
         % (len(result), clock() - start, path, recorded))
    return result
