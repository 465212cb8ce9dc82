"""Who this rank is and where the ranks meet: pure functions of the environment.

Every launcher spells rank and world size differently (Slurm, Open MPI, MPICH, torchrun);
`distdoctor.launch.detect_context` reads them. This module adds what the test needs on top:
the rendezvous address and port, each with the reason it was chosen, so that the report can
say "MASTER_ADDR=node1 (first host of SLURM_STEP_NODELIST)" instead of leaving users to guess.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from distdoctor import hostlist, launch
from distdoctor.launch import detect_context
from distdoctor.parsers import ParseError
from distdoctor.parsers.slurm import parse_counts

# Derived ports stay below Linux's ephemeral range (32768-60999), so a derived rendezvous
# port never collides with a socket some other process got from the kernel.
PORT_BASE = 20000
PORT_SPAN = 10000
DEFAULT_PORT = 29500


class RendezvousError(ValueError):
    """The environment does not say enough to start: a usage problem, not a cluster fault."""


@dataclass(frozen=True)
class Identity:
    rank: int
    world_size: int
    local_rank: int
    launcher: str  # srun, openmpi, mpich, torchrun, env, local
    description: str
    job_id: str = ""
    step_id: str = ""
    local_world_size: int | None = None
    kind: str = ""  # RunContext.kind, as `check` reports it (slurm-step, mpirun, torchrun, env)
    node_rank: int | None = None


@dataclass(frozen=True)
class Endpoint:
    addr: str
    port: int
    addr_why: str
    port_why: str


def identity(env: Mapping[str, str]) -> Identity:
    ctx = detect_context(env)
    if ctx.kind in ("slurm-batch", "slurm-allocation"):
        raise RendezvousError(
            f"this is the {ctx.description}: nccl-test runs one process per rank. "
            f"Start it with `srun -N<nodes> --ntasks-per-node=<gpus> distdoctor nccl-test`")
    if ctx.rank is None or ctx.world_size is None:
        raise RendezvousError(
            "cannot tell this process's rank and world size: none of SLURM_PROCID/SLURM_NTASKS (srun), "
            "OMPI_COMM_WORLD_RANK/SIZE (Open MPI), PMI_RANK/PMI_SIZE (MPICH) or RANK/WORLD_SIZE (torchrun) "
            "is set. Run it under srun, mpirun or torchrun, or use `distdoctor nccl-test --local N`")
    if ctx.world_size < 1 or not 0 <= ctx.rank < ctx.world_size:
        raise RendezvousError(f"rank {ctx.rank} is outside a world of size {ctx.world_size} "
                              f"(from {ctx.description})")
    launcher = {"openmpi": "openmpi", "mpich": "mpich", "srun": "srun", "torchrun": "torchrun"}.get(
        ctx.launcher, "local" if env.get("DISTDOCTOR_NCCL_TEST_LOCAL") else "env")
    local_rank = ctx.local_rank if ctx.local_rank is not None else 0
    return Identity(ctx.rank, ctx.world_size, local_rank, launcher,
                    "distdoctor nccl-test --local" if launcher == "local" else ctx.description,
                    ctx.job_id, ctx.step_id, ctx.local_world_size, ctx.kind, ctx.node_rank)


def step_hosts(env: Mapping[str, str]) -> list[str]:
    """The hosts of the Slurm step in order, [] outside Slurm or when the list is unreadable."""
    expr = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or ""
    try:
        return hostlist.expand(expr) if expr else []
    except hostlist.HostlistError:
        return []


def expected_rank_hosts(env: Mapping[str, str]) -> dict[int, str]:
    """Where Slurm placed each rank of the step, when it can be known from the environment
    (block distribution, the default): rank -> host. {} otherwise."""
    hosts = step_hosts(env)
    try:
        counts = parse_counts(env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE") or "")
    except ParseError:  # absent or malformed: slurm.task-counts reports it; here it only means "unknown"
        counts = []
    distribution = (env.get("SLURM_DISTRIBUTION") or "block").split(":")[0]
    if not hosts or len(counts) != len(hosts) or distribution not in ("block", ""):
        return {}
    placement: dict[int, str] = {}
    rank = 0
    for host, count in zip(hosts, counts):
        for _ in range(count):
            placement[rank] = host
            rank += 1
    return placement


def endpoint(env: Mapping[str, str], ident: Identity, parent_pid: int | None = None) -> Endpoint:
    """parent_pid: this process's parent; under MPICH on one node that is Hydra's proxy, the
    same for every rank, so a port derived from it keeps concurrent tests apart."""
    job = launch.job(env)
    single_node = ident.local_world_size is not None and ident.local_world_size == ident.world_size
    on_this_host = ident.world_size == 1 or single_node or ident.launcher == "local"
    named = bool((env.get("MASTER_ADDR") or "").strip()) or ident.launcher == "srun"
    if job.rank0_host and (named or not on_this_host):
        addr, addr_why = job.rank0_host, job.rank0_why
    elif on_this_host:  # the loopback: no name to resolve, no route to need
        addr, addr_why = "127.0.0.1", "every rank runs on this host (MASTER_ADDR unset)"
    else:
        raise RendezvousError(
            f"MASTER_ADDR is not set and cannot be derived under {ident.description} with ranks on "
            f"several hosts: export MASTER_ADDR=<rank 0's host> (and MASTER_PORT) before launching")
    raw_port = (env.get("MASTER_PORT") or "").strip()
    if raw_port:
        if not raw_port.isdigit() or not 0 < int(raw_port) < 65536:
            raise RendezvousError(f"MASTER_PORT={raw_port!r} is not a TCP port number (1-65535)")
        return Endpoint(addr, int(raw_port), addr_why, "MASTER_PORT from the environment")
    if job.seed:
        return Endpoint(addr, launch.derived_port(job.seed, PORT_BASE, PORT_SPAN), addr_why,
                        f"derived from {job.seed_why} (MASTER_PORT unset)")
    if ident.launcher == "mpich" and single_node and parent_pid:
        return Endpoint(addr, launch.derived_port(f"mpich:{parent_pid}", PORT_BASE, PORT_SPAN), addr_why,
                        f"derived from the pid of MPICH's proxy ({parent_pid}) (MASTER_PORT unset)")
    return Endpoint(addr, DEFAULT_PORT, addr_why, f"the default {DEFAULT_PORT} (MASTER_PORT unset)")
