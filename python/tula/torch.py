"""PyTorch under Slurm and Tula: torch.distributed (gloo) set up from Slurm's variables, the
shard of a data set for this rank, and the CPU threads of a task. Import it as `import
tula.torch`; it needs PyTorch, the rest of the package does not."""

import datetime
import fcntl
import os
import socket
import struct
from typing import List, Optional, Tuple

import torch
import torch.distributed as dist

from ._env import env_int

SIOCGIFADDR = 0x8915  # <linux/sockios.h>: the IPv4 address of an interface


def master_port(env=None) -> int:
    """$MASTER_PORT, else 20000 + SLURM_JOB_ID % 20000 (one port per job), else 29500."""
    env = os.environ if env is None else env
    port = env_int(env, "MASTER_PORT", 1, "the rendezvous port of rank 0")
    if port is not None:
        if port > 65535:
            raise ValueError("tula: MASTER_PORT=%r is not a port (1..65535)" % env["MASTER_PORT"])
        return port
    job = env_int(env, "SLURM_JOB_ID", 0, "Slurm's job id")
    return 20000 + job % 20000 if job is not None else 29500


def master_addr(env=None) -> str:
    """$MASTER_ADDR, else SLURM_LAUNCH_NODE_IPADDR (the node srun ran on: the batch host, where
    rank 0 runs), else 127.0.0.1."""
    env = os.environ if env is None else env
    return env.get("MASTER_ADDR") or env.get("SLURM_LAUNCH_NODE_IPADDR") or "127.0.0.1"


def interface_address(name: str) -> Optional[str]:
    """The IPv4 address of interface NAME (ioctl SIOCGIFADDR), None when it has none."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("256s", name.encode()[:15])
        try:
            reply = fcntl.ioctl(s.fileno(), SIOCGIFADDR, req)
        except OSError:
            return None
    return socket.inet_ntoa(reply[20:24])


def interface_towards(addr: str) -> Optional[str]:
    """The name of the interface whose address routes to ADDR (an IPv4 address or a name that
    resolves), None when none is found: a UDP socket connected to ADDR (no packet is sent)
    tells the local address, and the interface holding it is looked up by ioctl."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((addr, 9))
            local = s.getsockname()[0]
    except OSError:
        return None
    for _, name in socket.if_nameindex():
        if interface_address(name) == local:
            return name
    return None


def init_distributed(backend: str = "gloo", timeout_seconds: float = 300.0) -> Tuple[int, int]:
    """Sets up torch.distributed for this task and returns (rank, world): rank SLURM_PROCID,
    world SLURM_NTASKS (else RANK and WORLD_SIZE; else one process), rank 0's address
    master_addr(), its port master_port(). GLOO_SOCKET_IFNAME, unless set, is the interface
    that routes to rank 0, so that gloo needs no name resolution (nodes without DNS). With one
    process no process group is made."""
    env = os.environ
    world = env_int(env, "SLURM_NTASKS", 1, "Slurm's task count")
    if world is not None:
        rank = env_int(env, "SLURM_PROCID", 0, "Slurm's rank of this task") or 0
    else:
        world = env_int(env, "WORLD_SIZE", 1, "the number of processes") or 1
        rank = env_int(env, "RANK", 0, "the rank of this process") or 0
    if rank >= world:
        raise ValueError("tula: rank %d is not below the %d ranks of the job" % (rank, world))
    if world == 1:
        return 0, 1
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    addr, port = master_addr(), master_port()
    env["MASTER_ADDR"], env["MASTER_PORT"] = addr, str(port)
    if backend == "gloo" and not env.get("GLOO_SOCKET_IFNAME"):
        ifname = interface_towards(addr)
        if ifname is None:
            raise RuntimeError("tula: no network interface routes to rank 0's address %s; set GLOO_SOCKET_IFNAME" % addr)
        env["GLOO_SOCKET_IFNAME"] = ifname
    dist.init_process_group(backend, init_method="env://", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=timeout_seconds))
    return rank, world


def shard(n: int, rank: int, world: int, *, epoch: int = 0, seed: int = 0, shuffle: bool = True) -> List[int]:
    """This rank's indices of a data set of N examples, as torch's DistributedSampler draws
    them: a permutation seeded by SEED + EPOCH (the same on every rank), padded by its own
    first indices to a multiple of WORLD, then every WORLD-th from RANK. Every rank gets
    ceil(N / WORLD) indices, so all ranks take the same number of steps."""
    if n < 1 or world < 1 or not 0 <= rank < world:
        raise ValueError("tula: shard(): needs n >= 1 and 0 <= rank < world (n=%r rank=%r world=%r)" % (n, rank, world))
    if shuffle:
        g = torch.Generator()
        g.manual_seed(seed + epoch)
        order = torch.randperm(n, generator=g).tolist()
    else:
        order = list(range(n))
    total = -(-n // world) * world
    while len(order) < total:
        order += order[:total - len(order)]
    return order[rank:total:world]


def set_threads(env=None) -> int:
    """torch.set_num_threads(SLURM_CPUS_PER_TASK, else 1): a task uses the CPUs Slurm gave it
    and no more (ranks sharing a node would otherwise oversubscribe it). Returns the count."""
    env = os.environ if env is None else env
    n = env_int(env, "SLURM_CPUS_PER_TASK", 1, "Slurm's CPUs per task") or 1
    torch.set_num_threads(n)
    return n


