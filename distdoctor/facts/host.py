"""Facts about the host itself: names, limits, shared memory, the run context."""

from __future__ import annotations

from dataclasses import dataclass

from distdoctor.facts import fact
from distdoctor.launch import detect_context
from distdoctor.model import RunContext


@fact
def hostname(facts) -> str:
    return facts.host.hostname()


@fact
def run_context(facts) -> RunContext:
    return detect_context(facts.host.env, slurm_installed=bool(facts.host.which("srun") or facts.host.which("sinfo")))


@dataclass(frozen=True)
class ShmInfo:
    path: str
    total: int | None  # bytes; None when /dev/shm is missing
    free: int | None


@fact
def shm(facts) -> ShmInfo:
    usage = facts.host.disk_usage("/dev/shm")
    if usage is None:
        return ShmInfo("/dev/shm", None, None)
    total, _used, free = usage
    return ShmInfo("/dev/shm", total, free)


@dataclass(frozen=True)
class Limit:
    soft: int  # -1 is unlimited
    hard: int


@fact
def memlock(facts) -> Limit:
    """RLIMIT_MEMLOCK in bytes (what `ulimit -l` shows in KiB)."""
    soft, hard = facts.host.rlimit("memlock")
    return Limit(soft, hard)


@fact
def infiniband_devices(facts) -> list[str]:
    """HCA names under /sys/class/infiniband (mlx5_0, ...); empty without RDMA hardware."""
    return facts.host.list_dir("/sys/class/infiniband") or []


@fact
def inventory(facts) -> dict:
    """This node's inventory of named facts (distdoctor.inventory), bounded by its own timeout."""
    from distdoctor import inventory as inventory_mod

    return inventory_mod.collect(facts,
                                 timeout=float(facts.options.get("inventory_timeout") or inventory_mod.COLLECT_TIMEOUT))
