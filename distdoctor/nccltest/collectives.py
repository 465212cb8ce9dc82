"""The collectives themselves, each checked exactly against what it must produce.

Inputs are small integers in float32, so sums over any realistic world size are exact and a
wrong answer is a real fault (a rank that joined with a different tensor, a broken transport),
never rounding.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable


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
