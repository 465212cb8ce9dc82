"""The collectives themselves, each checked exactly against what it must produce.

Inputs are small integers in float32, so sums over any realistic world size are exact and a
wrong answer is a real fault (a rank that joined with a different tensor, a broken transport),
never rounding.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class OpResult:
    name: str
    ok: bool
    seconds: float
    detail: str  # what was checked, or what went wrong

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "seconds": round(self.seconds, 6), "detail": self.detail}


def first_line(exc: BaseException, limit: int = 400) -> str:
    text = str(exc).strip() or type(exc).__name__
    lines = [ln for ln in text.splitlines() if ln.strip()]
    # torch prefixes errors with C++ frames; the useful sentence is usually the first line.
    return f"{type(exc).__name__}: {lines[0][:limit] if lines else text[:limit]}"


def timed(name: str, sync: Callable[[], None], op: Callable[[], tuple[bool, str]]) -> OpResult:
    start = time.monotonic()
    try:
        good, detail = op()
        sync()
    except Exception as exc:  # a failed collective is a finding, not a crash
        return OpResult(name, False, time.monotonic() - start, first_line(exc))
    return OpResult(name, good, time.monotonic() - start, detail)


def all_reduce(torch: Any, dist: Any, device: Any, rank: int, world: int) -> tuple[bool, str]:
    tensor = torch.full((4,), float(rank + 1), device=device)
    dist.all_reduce(tensor)
    expected = world * (world + 1) / 2
    got = tensor.cpu().tolist()
    if all(v == expected for v in got):
        return True, f"sum of (rank+1) over {world} ranks = {expected:g}"
    return False, f"expected {expected:g} in every element, got {got}"


def broadcast(torch: Any, dist: Any, device: Any, rank: int, world: int) -> tuple[bool, str]:
    expected = [float(100 + i) for i in range(8)]
    tensor = torch.tensor(expected, device=device) if rank == 0 else torch.zeros(8, device=device)
    dist.broadcast(tensor, src=0)
    got = tensor.cpu().tolist()
    return (True, "rank 0's 8 values arrived intact") if got == expected else (
        False, f"expected {expected}, got {got}")


def all_gather(torch: Any, dist: Any, device: Any, rank: int, world: int) -> tuple[bool, str]:
    parts = [torch.zeros(1, device=device) for _ in range(world)]
    dist.all_gather(parts, torch.tensor([float(rank)], device=device))
    got = [p.item() for p in parts]
    expected = [float(r) for r in range(world)]
    return (True, f"gathered ranks 0..{world - 1} in order") if got == expected else (
        False, f"expected {expected}, got {got}")


OPS = (("all-reduce", all_reduce), ("broadcast", broadcast), ("all-gather", all_gather))


def run_all(rank, backend: str) -> tuple[list[OpResult], list[dict]]:
    """The init, collectives and bench phases of one rank (rank: session.Rank): the results to
    publish, and the bench rows."""
    import torch.distributed as dist

    from distdoctor.nccltest import bench as bench_mod

    torch = rank.torch
    results: list[OpResult] = []
    device = torch.device("cpu")
    sync = lambda: None  # noqa: E731
    rank.set_phase("init")
    started = time.monotonic()
    reserve = getattr(rank, "collective_reserve", 0.0)
    timeout = datetime.timedelta(seconds=max(1.0, rank.left() - reserve))
    try:
        if backend == "nccl":
            device = torch.device("cuda", rank.ident.local_rank)
            torch.cuda.set_device(device)
            sync = torch.cuda.synchronize
        kwargs = {"device_id": device} if backend == "nccl" else {}
        dist.init_process_group(backend, store=dist.PrefixStore("pg", rank.channel.store), rank=rank.rank,
                                world_size=rank.world, timeout=timeout, **kwargs)
        if backend == "gloo":
            # Names every rank that does not reach the barrier, where a plain barrier just hangs.
            dist.monitored_barrier(timeout=datetime.timedelta(seconds=max(1.0, rank.left() - reserve)),
                                   wait_all_ranks=True)
    except Exception as exc:  # any init failure is the finding, with torch's first line
        results.append(OpResult("init", False, time.monotonic() - started, first_line(exc)))
        return results, []
    results.append(OpResult("init", True, time.monotonic() - started, f"process group of {rank.world} ranks"))
    for name, op in OPS:
        rank.set_phase(name)
        result = timed(name, sync, lambda op=op: op(torch, dist, device, rank.rank, rank.world))
        results.append(result)
        rank.log(f"{name}: {'ok' if result.ok else 'FAILED'} {result.detail}")
        if not result.ok and result.detail.startswith(("RuntimeError", "DistBackendError", "DistError")):
            return results, []
    rows: list[dict] = []
    if rank.args.bench:
        rank.set_phase("bench")
        try:
            rows = bench_mod.sweep(torch, dist, device, rank.rank, rank.world, rank.args.bench_sizes,
                                   rank.args.iters, sync, rank.phase_deadline() - 1.0 - reserve,
                                   on_size=lambda s: rank.log(f"bench {bench_mod.human_size(s)}"))
        except Exception as exc:  # a failed size is the finding
            results.append(OpResult("bench", False, 0.0, first_line(exc)))
    try:
        dist.destroy_process_group()
    except Exception:  # already torn down by a failure
        pass
    return results, rows
