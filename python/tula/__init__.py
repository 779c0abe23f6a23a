"""Tula's Python side of the job contract (tula-jobs(7)).

    import tula
    p = tula.plan(default_batch=64, default_epochs=2)   # Tula's plan, or the defaults
    with tula.Metrics(workload="m@d", nodes=p.nodes, ranks=p.ranks, global_batch=p.global_batch) as m:
        m.step(0, 0.05, p.global_batch)
        m.epoch(1, 12.5, 0.87)

tula.profile() is the loop `tula profile compute --command` runs. tula.torch (imported on its
own, it needs PyTorch) sets up torch.distributed from Slurm's variables. Standard library only.
"""

from ._env import Plan, check_workload, plan
from ._metrics import Metrics, default_path
from ._profile import profile, profile_batches

__all__ = ["Plan", "plan", "Metrics", "default_path", "profile", "profile_batches", "check_workload"]
