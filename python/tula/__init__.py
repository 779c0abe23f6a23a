"""Tula's Python side of the job contract (tula-jobs(7)).

    import tula
    p = tula.plan(default_batch=64, default_epochs=2)   # Tula's plan, or the defaults
    with tula.Metrics(workload="m@d", nodes=p.nodes, ranks=p.ranks, global_batch=p.global_batch) as m:
        m.step(0, 0.05, p.global_batch)
        m.epoch(1, 12.5, 0.87)

tula.Requeue survives the job's time limit: it loads the checkpoint of an earlier part of the
job, stops on SIGUSR1 or SIGTERM or when the time left (SLURM_JOB_END_TIME, else squeue) falls
below the stop reserve (stop_reserve_seconds(): 30 s + 2 x the longest step + the last save,
seconds), saves the checkpoint atomically, runs `scontrol requeue` and exits with status 3
(STOP_EXIT_STATUS):

    with tula.Requeue(save=lambda path: torch.save(state, path),
                      load=lambda path: state.update(torch.load(path))) as rq:
        for step in range(state["step"], total_steps):
            train_step()
            state["step"] = step + 1
            if rq.should_stop():
                rq.stop(step + 1)

tula.profile() is the loop `tula profile compute --command` runs; tula.measure() times a
first job's step before it trains when TULA_PROFILE asks for it (a workload nobody profiled). tula.torch (imported on its
own, it needs PyTorch) sets up torch.distributed from Slurm's variables. Standard library only.
"""

from ._env import Plan, check_workload, plan
from ._metrics import Metrics, default_path
from ._measure import measure, measure_budget, measured_batches
from ._profile import profile, profile_batches
from ._requeue import (STOP_EXIT_STATUS, Requeue, atomic_save, job_end_time, parse_slurm_duration, requeue_job,
                       stop_reserve_seconds)

__all__ = ["Plan", "plan", "Metrics", "default_path", "profile", "profile_batches", "check_workload",
           "measure", "measure_budget", "measured_batches",
           "Requeue", "STOP_EXIT_STATUS", "stop_reserve_seconds", "parse_slurm_duration", "job_end_time",
           "requeue_job", "atomic_save"]
