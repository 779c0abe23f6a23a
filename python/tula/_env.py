"""The job's environment under Tula (tula-jobs(7)): the plan Tula gave the job and where the
job's ranks are, read from TULA_* and Slurm's variables, and the grammar of the values."""

import math
import os
import re
from dataclasses import dataclass
from typing import Mapping, Optional

# MODEL@DATASET: letters, digits, _ . - on each side of one @ (libtula's tula_check_workload)
_WORKLOAD_RE = re.compile(r"[A-Za-z0-9_.-]+@[A-Za-z0-9_.-]+\Z")
WORKLOAD_MAX = 127
_UINT_RE = re.compile(r"[0-9]+\Z")
_NUMBER_RE = re.compile(r"[0-9]+(\.[0-9]*)?([eE][+-]?[0-9]+)?\Z|\.[0-9]+([eE][+-]?[0-9]+)?\Z")


def check_workload(value, what="workload"):
    """Returns VALUE if it is a workload name MODEL@DATASET, else raises ValueError."""
    if not isinstance(value, str) or len(value) > WORKLOAD_MAX or not _WORKLOAD_RE.match(value):
        raise ValueError(
            "tula: %s %r is not of the form MODEL@DATASET (letters, digits, _ . - and one @, "
            "at most %d characters)" % (what, value, WORKLOAD_MAX))
    return value


def env_int(env: Mapping[str, str], name: str, minimum: int, meaning: str) -> Optional[int]:
    """The whole number >= MINIMUM in env[NAME]; None when it is unset or empty."""
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return None
    text = raw.strip()
    if not _UINT_RE.match(text) or int(text) < minimum:
        raise ValueError("tula: %s=%r is not a whole number >= %d (%s)" % (name, raw, minimum, meaning))
    return int(text)


def env_number(env: Mapping[str, str], name: str, meaning: str, positive: bool = False) -> Optional[float]:
    """The finite decimal number >= 0 (> 0 with POSITIVE) in env[NAME]; None when unset or empty."""
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return None
    text = raw.strip()
    value = float(text) if _NUMBER_RE.match(text) else math.nan
    if not math.isfinite(value) or (positive and value <= 0):
        raise ValueError("tula: %s=%r is not a number %s 0 (%s)"
                         % (name, raw, ">" if positive else ">=", meaning))
    return value


@dataclass(frozen=True)
class Plan:
    """What a trainer needs of the job: Tula's plan (or the defaults) and this process's place."""
    global_batch: int          # examples per step over all ranks
    local_batch: int           # examples per step on this rank: global_batch // ranks, at least 1
    epochs: int
    nodes: int
    ranks: int
    rank: int
    local_rank: int
    workload: Optional[str]    # TULA_WORKLOAD, None when not given
    predicted_seconds: Optional[float]  # Tula's predicted training time, None when not given
    under_tula: bool           # whether Tula planned the job (any of the TULA_* plan variables set)


def _first(env, names, minimum, meaning):
    for name in names:
        value = env_int(env, name, minimum, meaning)
        if value is not None:
            return value
    return None


def plan(default_batch: int = 64, default_epochs: int = 1, env: Optional[Mapping[str, str]] = None) -> Plan:
    """The job's plan from the environment: TULA_BATCH_SIZE, TULA_EPOCHS, TULA_NODES,
    TULA_WORKLOAD, TULA_PREDICTED_SECONDS, and the ranks from Slurm (SLURM_NTASKS, SLURM_PROCID,
    SLURM_LOCALID, SLURM_STEP_NUM_NODES or SLURM_JOB_NUM_NODES) or, without Slurm, from
    torchrun's WORLD_SIZE, RANK and LOCAL_RANK. Unset or empty variables take the defaults (one
    process, DEFAULT_BATCH, DEFAULT_EPOCHS); a malformed one raises ValueError."""
    env = os.environ if env is None else env
    for name, value in (("default_batch", default_batch), ("default_epochs", default_epochs)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError("tula: plan(): %s=%r is not a whole number >= 1" % (name, value))
    batch = env_int(env, "TULA_BATCH_SIZE", 1, "the global batch Tula planned")
    epochs = env_int(env, "TULA_EPOCHS", 1, "the epochs Tula planned")
    tula_nodes = env_int(env, "TULA_NODES", 1, "the nodes Tula planned")
    predicted = env_number(env, "TULA_PREDICTED_SECONDS", "Tula's predicted training seconds")
    workload = env.get("TULA_WORKLOAD")
    if workload is not None and workload.strip() == "":
        workload = None
    if workload is not None:
        check_workload(workload, "TULA_WORKLOAD")
    slurm = env_int(env, "SLURM_NTASKS", 1, "Slurm's task count") is not None
    if slurm:
        ranks = env_int(env, "SLURM_NTASKS", 1, "Slurm's task count")
        rank = env_int(env, "SLURM_PROCID", 0, "Slurm's rank of this task") or 0
        local_rank = env_int(env, "SLURM_LOCALID", 0, "Slurm's rank of this task on its node") or 0
    else:
        ranks = env_int(env, "WORLD_SIZE", 1, "the number of processes") or 1
        rank = env_int(env, "RANK", 0, "the rank of this process") or 0
        local_rank = env_int(env, "LOCAL_RANK", 0, "the rank of this process on its node") or 0
    if rank >= ranks:
        raise ValueError("tula: rank %d is not below the %d ranks of the job (%s)"
                         % (rank, ranks, "SLURM_PROCID, SLURM_NTASKS" if slurm else "RANK, WORLD_SIZE"))
    nodes = _first(env, ("SLURM_STEP_NUM_NODES", "SLURM_JOB_NUM_NODES"), 1, "Slurm's node count")
    if nodes is None:
        nodes = tula_nodes if tula_nodes is not None else 1
    nodes = min(nodes, ranks)  # a job step with fewer ranks than nodes runs on that many
    global_batch = batch if batch is not None else default_batch
    return Plan(global_batch=global_batch, local_batch=max(1, global_batch // ranks),
                epochs=epochs if epochs is not None else default_epochs, nodes=nodes, ranks=ranks,
                rank=rank, local_rank=local_rank, workload=workload, predicted_seconds=predicted,
                under_tula=any(env.get(n, "").strip() for n in
                               ("TULA_BATCH_SIZE", "TULA_EPOCHS", "TULA_NODES", "TULA_PREDICTED_SECONDS")))
