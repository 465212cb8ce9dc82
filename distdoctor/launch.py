"""Who am I in a job: the launcher, rank, local rank and world size, from the environment.

Pure: a function of an environment mapping, so the same code serves `check`'s header,
`nccl-test`'s rendezvous and the tests.
"""

from __future__ import annotations

from typing import Mapping

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
