"""`--bench`: an all_reduce message-size sweep in the manner of nccl-tests' all_reduce_perf.

algbw = bytes / time; busbw = algbw * 2(n-1)/n, nccl-tests' bus bandwidth for all_reduce, which
is comparable across world sizes and with the hardware's link speed.
"""

from __future__ import annotations

import re
import time
from typing import Any, Callable

_SIZE = re.compile(r"^\s*(\d+)\s*([kKmMgG]?)[bB]?\s*$")
_UNITS = {"": 1, "k": 1024, "m": 1024 ** 2, "g": 1024 ** 3}


def parse_size(text: str) -> int:
    """'8', '1K', '64M', '1G' -> bytes (powers of 1024, as nccl-tests)."""
    match = _SIZE.match(str(text))
    if not match:
        raise ValueError(f"{text!r} is not a size (examples: 8, 1K, 64M, 1G)")
    return int(match.group(1)) * _UNITS[match.group(2).lower()]


def sizes(minimum: int, maximum: int, factor: int) -> list[int]:
    if minimum < 4 or maximum < minimum or factor < 2:
        raise ValueError("need 4 <= -b <= -e and -f >= 2")
    out, size = [], minimum
    while size <= maximum:
        out.append(size)
        size *= factor
    return out


def bus_bandwidth(algbw: float, world: int) -> float:
    return algbw * 2 * (world - 1) / world if world > 0 else 0.0


def human_size(n: int) -> str:
    for unit, scale in (("G", 1024 ** 3), ("M", 1024 ** 2), ("K", 1024)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return str(n)


def sweep(torch: Any, dist: Any, device: Any, rank: int, world: int, byte_sizes: list[int], iters: int,
          sync: Callable[[], None], deadline: float, on_size: Callable[[int], None] | None = None) -> list[dict]:
    """One row per size: time per all_reduce (mean of iters after one warm-up), bandwidths, and
    whether a final all_reduce of (rank+1) summed exactly. Stops early, marking the rest
    'not run', when the deadline is near."""
    rows: list[dict] = []
    expected = world * (world + 1) / 2
    for size in byte_sizes:
        if time.monotonic() > deadline:
            rows.append({"bytes": size, "skipped": "not run: the --timeout was nearly used up"})
            continue
        if on_size:
            on_size(size)
        count = max(1, size // 4)
        tensor = torch.full((count,), float(rank + 1), dtype=torch.float32, device=device)
        dist.all_reduce(tensor)  # warm-up: connections and buffers are set up here
        dist.barrier()
        sync()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(tensor)
        sync()
        seconds = (time.perf_counter() - start) / iters
        tensor.fill_(float(rank + 1))
        dist.all_reduce(tensor)
        wrong = int((tensor != expected).sum().item())
        algbw = count * 4 / seconds / 1e9 if seconds > 0 else 0.0
        rows.append({"bytes": count * 4, "count": count, "time_us": round(seconds * 1e6, 2),
                     "algbw_gbs": round(algbw, 4), "busbw_gbs": round(bus_bandwidth(algbw, world), 4),
                     "wrong": wrong, "ok": wrong == 0})
    return rows


def bench_table(rows: list[dict]) -> dict[str, Any]:
    table_rows = []
    for row in rows:
        if "skipped" in row:
            table_rows.append([human_size(row["bytes"]), "-", "-", "-", "-", row["skipped"]])
        else:
            table_rows.append([human_size(row["bytes"]), row["count"], f"{row['time_us']:.1f}",
                               f"{row['algbw_gbs']:.3f}", f"{row['busbw_gbs']:.3f}",
                               "ok" if row["ok"] else f"WRONG ({row['wrong']} elements)"])
    return {"columns": ["size", "count", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "check"], "rows": table_rows}
