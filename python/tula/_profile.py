"""The profiling loop of `tula profile compute --command CMD`: the median time of one training
step at each local batch Tula asks for, written as "profile" lines of the metrics file."""

import os
import statistics
import sys
import time
from typing import Callable, Dict, Iterable, Optional

from ._env import env_number
from ._metrics import Metrics

MIN_STEPS = 5  # timed steps per local batch, at the least


def profile_batches(env=None):
    """The local batches of TULA_PROFILE_BATCHES ("16,32,64"); None when it is unset or empty."""
    env = os.environ if env is None else env
    raw = env.get("TULA_PROFILE_BATCHES", "")
    if raw.strip() == "":
        return None
    out = []
    for part in raw.split(","):
        part = part.strip()
        if not part.isdigit() or not part.isascii() or int(part) < 1:
            raise ValueError("tula: TULA_PROFILE_BATCHES=%r is not a comma list of whole numbers >= 1 "
                             "(local batch sizes, e.g. 16,32,64)" % raw)
        out.append(int(part))
    return out


def profile(step_fn: Callable, make_batch: Callable[[int], object], *, batches: Optional[Iterable[int]] = None,
            min_seconds: Optional[float] = None, warmup: int = 3, metrics: Optional[Metrics] = None,
            workload: Optional[str] = None) -> Dict[int, float]:
    """Times STEP_FN(data), one training step (forward, backward, update; no allreduce), at each
    local batch b of BATCHES (default: TULA_PROFILE_BATCHES): data = MAKE_BATCH(b), WARMUP
    untimed steps, then timed steps until at least MIN_SECONDS (default:
    TULA_PROFILE_MIN_SECONDS, else 1.0) and at least 5 steps. Writes a "profile" line with the
    median step time per b to METRICS (default: a new metrics file at $TULA_METRICS for
    WORKLOAD, default $TULA_WORKLOAD, 1 node, 1 rank) and returns {b: median seconds}. STEP_FN
    must return when the step's work is done (synchronise a GPU there). One progress line per
    local batch goes to stderr."""
    if batches is None:
        batches = profile_batches()
        if batches is None:
            raise ValueError("tula: profile(): no local batch sizes: give batches= or set TULA_PROFILE_BATCHES "
                             "(tula profile compute --command sets it)")
    batches = list(batches)
    for b in batches:
        if isinstance(b, bool) or not isinstance(b, int) or b < 1:
            raise ValueError("tula: profile(): local batch %r is not a whole number >= 1" % (b,))
    if not batches:
        raise ValueError("tula: profile(): no local batch sizes to time")
    if min_seconds is None:
        min_seconds = env_number(os.environ, "TULA_PROFILE_MIN_SECONDS", "minimum timed seconds per local batch",
                                 positive=True)
        if min_seconds is None:
            min_seconds = 1.0
    elif isinstance(min_seconds, bool) or not isinstance(min_seconds, (int, float)) or not min_seconds > 0 \
            or min_seconds == float("inf"):
        raise ValueError("tula: profile(): min_seconds %r is not a finite number > 0" % (min_seconds,))
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError("tula: profile(): warmup %r is not a whole number >= 0" % (warmup,))
    own = metrics is None
    if own:
        workload = workload or os.environ.get("TULA_WORKLOAD")
        if not workload:
            raise ValueError("tula: profile(): no workload for the metrics file: give workload= or set TULA_WORKLOAD")
        metrics = Metrics(None, workload=workload, nodes=1, ranks=1, global_batch=None)
    result = {}
    try:
        for b in batches:
            data = make_batch(b)
            for _ in range(warmup):
                step_fn(data)
            times = []
            total = 0.0
            while total < min_seconds or len(times) < MIN_STEPS:
                t0 = time.perf_counter()
                step_fn(data)
                dt = time.perf_counter() - t0
                times.append(dt)
                total += dt
            median = statistics.median(times)
            if not median > 0:  # a clock too coarse for the step
                median = total / len(times) if total > 0 else 1e-9
            metrics.profile(b, median, len(times))
            result[b] = median
            print("tula: profile: local batch %d: %.6f s per step (median of %d steps, %.2f s timed)"
                  % (b, median, len(times), total), file=sys.stderr, flush=True)
    finally:
        if own:
            metrics.close()
    return result
