"""Who am I in a job, and what job is it: the launcher, rank, local rank and world size
(`detect_context`); the seed every process of the job derives ports and keys from, the job's
nodes and where rank 0 runs (`job`).

Pure: functions of an environment mapping, so the same code serves `check`'s header and job
report, `nccl-test`'s rendezvous and the tests.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from typing import Mapping

from distdoctor import hostlist
from distdoctor.model import RunContext


# Step ids of Slurm's special steps: names as newer releases print them, and the numbers that
# older releases (and some tools) put in SLURM_STEP_ID (slurm.h: SLURM_BATCH_SCRIPT and friends;
# 0xfffffffe/0xffffffff before Slurm 20.11, 0xfffffffa-0xfffffffd since).
SPECIAL_STEPS = {
    "batch": "batch", "extern": "extern", "interactive": "interactive", "pending": "pending",
    "4294967290": "interactive", "4294967291": "batch", "4294967292": "extern", "4294967293": "pending",
    "4294967294": "batch", "4294967295": "extern",
}


def step_kind(step: str) -> str:
    """'normal' for a step srun started, else the special step's name, '' when unreadable."""
    step = step.strip().lower()
    if step in SPECIAL_STEPS:
        return SPECIAL_STEPS[step]
    head, plus, tail = step.partition("+")  # a heterogeneous step prints as '3+1'
    if head.isdigit() and (not plus or tail.isdigit()):
        return "normal"
    return ""


def _int(env: Mapping[str, str], *names: str) -> int | None:
    for name in names:
        value = env.get(name, "").strip()
        if value:
            # Ranks and sizes are non-negative and fit in 32 bits in every launcher; anything
            # else ('-1', '1e9', a 200 KB digit string) is unreadable, not a number to trust.
            if not (value.isascii() and value.isdigit()) or len(value) > 10 or int(value) > 0xFFFFFFFF:
                return None
            return int(value)
    return None


def detect_context(env: Mapping[str, str], slurm_installed: bool = False) -> RunContext:
    job = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID") or ""
    step = env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID") or ""

    if env.get("TORCHELASTIC_RUN_ID") or (env.get("LOCAL_WORLD_SIZE") and env.get("GROUP_RANK") is not None):
        under = " under srun" if step else ""
        return RunContext(
            "torchrun", f"torchrun{under}" + (f" (Slurm job {job})" if job else ""), "torchrun",
            rank=_int(env, "RANK"), local_rank=_int(env, "LOCAL_RANK"), world_size=_int(env, "WORLD_SIZE"),
            local_world_size=_int(env, "LOCAL_WORLD_SIZE"), node_rank=_int(env, "GROUP_RANK"),
            job_id=job, step_id=step,
        )
    if env.get("OMPI_COMM_WORLD_SIZE"):
        inside = f" inside Slurm job {job}" if job else ""
        return RunContext(
            "mpirun", f"Open MPI mpirun{inside}", "openmpi",
            rank=_int(env, "OMPI_COMM_WORLD_RANK"), local_rank=_int(env, "OMPI_COMM_WORLD_LOCAL_RANK"),
            world_size=_int(env, "OMPI_COMM_WORLD_SIZE"), local_world_size=_int(env, "OMPI_COMM_WORLD_LOCAL_SIZE"),
            node_rank=_int(env, "OMPI_COMM_WORLD_NODE_RANK"), job_id=job, step_id=step,
        )
    if env.get("PMI_SIZE") and not step:
        inside = f" inside Slurm job {job}" if job else ""
        return RunContext(
            "mpirun", f"MPICH/Hydra mpiexec{inside}", "mpich",
            rank=_int(env, "PMI_RANK"), local_rank=_int(env, "MPI_LOCALRANKID"),
            world_size=_int(env, "PMI_SIZE"), local_world_size=_int(env, "MPI_LOCALNRANKS"),
            job_id=job, step_id=step,
        )
    kind = step_kind(step) if step else ""
    if job and step and kind not in ("batch", "extern", "interactive", "pending"):
        return RunContext(
            "slurm-step", f"srun step {job}.{step}", "srun",
            rank=_int(env, "SLURM_PROCID"), local_rank=_int(env, "SLURM_LOCALID"),
            world_size=_int(env, "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS"),
            node_rank=_int(env, "SLURM_NODEID"), job_id=job, step_id=step,
        )
    if job and (kind == "batch" or (env.get("ENVIRONMENT") == "BATCH" and not step)):
        return RunContext("slurm-batch", f"batch step of Slurm job {job} (no srun)", "sbatch",
                          job_id=job, step_id="batch")
    if job:
        return RunContext("slurm-allocation", f"Slurm allocation {job} (salloc shell, no srun)",
                          "salloc", job_id=job)
    if env.get("RANK") and env.get("WORLD_SIZE"):
        return RunContext("env", "torch env:// variables set by hand", "env",
                          rank=_int(env, "RANK"), local_rank=_int(env, "LOCAL_RANK"),
                          world_size=_int(env, "WORLD_SIZE"))
    if slurm_installed:
        return RunContext("login", "login node (Slurm installed, no job)")
    return RunContext("none", "no scheduler or launcher")


# --- what every process of one job derives the same way ----------------------------------------

@dataclass(frozen=True)
class Job:
    """What every process of one job must derive alike, whichever node it runs on: the seed that
    ports and keys come from, the job's nodes, and the host rank 0 runs on ('' when unknown)."""

    seed: str = ""
    seed_why: str = ""
    nodes: tuple[str, ...] = ()
    rank0_host: str = ""
    rank0_why: str = ""


def derived_port(seed: str, base: int, span: int) -> int:
    """A port in [base, base + span) that every process given the same seed computes alike."""
    return base + zlib.crc32(seed.encode()) % span


def nodelist_vars(env: Mapping[str, str], ctx: RunContext | None = None) -> tuple[str, ...]:
    """The variables that name the job's nodes, in the order to read them: an mpirun rank's
    Slurm step is its daemon's (on mpirun's own node, none), so it reads the allocation's list."""
    ctx = ctx or detect_context(env)
    if ctx.kind == "mpirun" or env.get("OMPI_MCA_ess_base_jobid", "").strip():
        return ("SLURM_JOB_NODELIST", "SLURM_NODELIST")
    return ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")


def _hostlist(env: Mapping[str, str], *names: str) -> tuple[str, ...]:
    expr = next((env[n] for n in names if env.get(n, "").strip()), "")
    try:
        return tuple(hostlist.expand(expr)) if expr else ()
    except hostlist.HostlistError:
        return ()  # slurm.nodelist reports it; here it only means "not known"


def _hnp_host(uri: str) -> str:
    """The first address of mpirun's own URI (`<jobid>.0;tcp://10.0.0.5,10.0.1.5:4242;tcp6://...`)."""
    match = re.search(r"tcp://([^,:;/\]]+)", uri)
    return match.group(1) if match else ""


def job(env: Mapping[str, str], ctx: RunContext | None = None) -> Job:
    """The job this process belongs to, as every one of its processes sees it.

    mpirun inside a Slurm allocation is why the order matters: the ranks on mpirun's own node
    run in the allocation's (batch) step, the others in the step of the daemon mpirun started
    with srun on their node, so Slurm's job.step and step node list differ between nodes, while
    Open MPI's job id and the allocation's node list do not."""
    ctx = ctx or detect_context(env)
    slurm_job = ctx.job_id
    ompi_job = env.get("OMPI_MCA_ess_base_jobid", "").strip()
    under_mpirun = ctx.kind == "mpirun" or bool(ompi_job)
    run_id = env.get("TORCHELASTIC_RUN_ID", "").strip()
    if ompi_job:
        seed, seed_why = f"ompi:{ompi_job}", f"the Open MPI job id {ompi_job}"
    elif slurm_job:
        seed, seed_why = f"slurm:{slurm_job}.{ctx.step_id}", f"Slurm job {slurm_job} step {ctx.step_id or '-'}"
    elif run_id and run_id != "none":
        # torchrun's default run id is 'none'; its rendezvous endpoint tells two such jobs apart
        seed = f"torchrun:{run_id}:{env.get('MASTER_ADDR', '')}:{env.get('MASTER_PORT', '')}"
        seed_why = "TORCHELASTIC_RUN_ID"
    else:
        seed, seed_why = "", ""
    nodes = _hostlist(env, *nodelist_vars(env, ctx))
    master = env.get("MASTER_ADDR", "").strip()
    hnp = _hnp_host(env.get("OMPI_MCA_orte_hnp_uri", ""))
    if master:
        rank0, rank0_why = master, "MASTER_ADDR from the environment"
    elif nodes and slurm_job and under_mpirun:
        rank0, rank0_why = nodes[0], ("the first node of the Slurm allocation, where mpirun maps rank 0 "
                                      "(MASTER_ADDR unset)")
    elif nodes and slurm_job:
        rank0, rank0_why = nodes[0], "the first host of the Slurm step's nodelist (MASTER_ADDR unset)"
    elif under_mpirun and hnp:
        rank0, rank0_why = hnp, ("the host mpirun runs on, from OMPI_MCA_orte_hnp_uri (MASTER_ADDR unset; "
                                 "set MASTER_ADDR if rank 0 runs elsewhere)")
    else:
        rank0, rank0_why = "", ""
    return Job(seed, seed_why, nodes, rank0, rank0_why)
