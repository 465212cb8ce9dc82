"""Timing two commands fairly: run them alternately (so drift in machine load hits both
alike), then compare medians. Shared by the benchmarks in this folder."""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time
from typing import Mapping, Sequence


def distdoctor_argv() -> list[str]:
    """The distdoctor beside this interpreter (a venv), else on PATH, else `python -m`."""
    exe = os.path.join(os.path.dirname(sys.executable), "distdoctor")
    if os.path.exists(exe):
        return [exe]
    found = shutil.which("distdoctor")
    return [found] if found else [sys.executable, "-m", "distdoctor"]


def timed(argv: Sequence[str], env: Mapping[str, str] | None = None, ok_codes=(0, 1), timeout: float = 300) -> float:
    start = time.perf_counter()
    proc = subprocess.run(list(argv), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          timeout=timeout, env=dict(env) if env is not None else None)
    elapsed = time.perf_counter() - start
    if ok_codes and proc.returncode not in ok_codes:
        print(f"warning: {' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()[-300:]}", file=sys.stderr)
    return elapsed


def compare(label_a: str, a: Sequence[str], label_b: str, b: Sequence[str], pairs: int,
            env: Mapping[str, str] | None = None, warm: bool = True) -> tuple[float, float, float]:
    """Run a and b alternately `pairs` times; print and return (median a, median b, median of
    the per-pair ratios b/a)."""
    if warm:  # page cache, __pycache__, package metadata
        timed(a, env), timed(b, env)
    times_a, times_b = [], []
    for _ in range(pairs):
        times_a.append(timed(a, env))
        times_b.append(timed(b, env))
    med_a, med_b = statistics.median(times_a), statistics.median(times_b)
    ratio = statistics.median(y / x for x, y in zip(times_a, times_b))
    width = max(len(label_a), len(label_b))
    print(f"pairs: {pairs}")
    print(f"{label_a:<{width}}  median {med_a:.3f} s  (min {min(times_a):.3f}, max {max(times_a):.3f})")
    print(f"{label_b:<{width}}  median {med_b:.3f} s  (min {min(times_b):.3f}, max {max(times_b):.3f})")
    print(f"difference {med_b - med_a:+.3f} s; median ratio {ratio:.3f}")
    return med_a, med_b, ratio
