"""How many of the tests that start torch ranks run at once, across the workers of a parallel
run (pytest-xdist): three for every two cores.

A rank of nccl-test, torchrun or a Flight Recorder job spends its first second or more importing
torch, and the tests around them hold bounds of a few seconds (rank 1 must arrive within 6 s,
a refused port must be named at once). Run side by side on every worker of a 2-core machine,
the imports alone push those bounds past; the other workers' tests (parsers, Slurm, sshd,
namespaces) do not compete for the same seconds. The slots are files under /tmp locked with
flock, so a slot is given back even when its holder dies.
"""

from __future__ import annotations

import fcntl
import os
import time
from contextlib import contextmanager
from typing import Iterator

from tests.harness.runprefix import RUN


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def default_count() -> int:
    """Slots of a kind: three for every two cores (slot() says why)."""
    return max(1, (3 * _cores() + 1) // 2)


def slots_dir() -> str:
    """Shared by the workers of a run; removed by the controller at the end (tests/conftest.py)."""
    return f"/tmp/distdoctor-test-slots-{RUN.value}"


def _open(kind: str, count: int | None):
    count = max(1, count or default_count())
    directory = slots_dir()
    os.makedirs(directory, exist_ok=True)
    return ([open(os.path.join(directory, f"{kind}.{i}"), "a") for i in range(count)],
            open(os.path.join(directory, f"{kind}.queue"), "a"))


@contextmanager
def _first_in_line(queue) -> Iterator[None]:
    """Wait in line for a slot: one taker at a time looks for a free slot, the others wait for
    the line (a blocking lock). Without it, a worker whose next torch test starts the moment its
    last one ends took the freed slot back every time, and a Slurm group's torch test waited
    137 s behind three such workers."""
    try:
        fcntl.flock(queue, fcntl.LOCK_EX)
        yield
    finally:
        queue.close()


@contextmanager
def slot(kind: str = "torch", count: int | None = None) -> Iterator[int]:
    """Hold one of `count` slots of `kind` for the block; waits for one. The default, three for
    every two cores: a torch test spends most of its time waiting on a bound, not computing, and
    one per core left a 2-core run waiting on its torch tests (measured: 6 min 39 s for the suite
    with two slots)."""
    handles, queue = _open(kind, count)
    held = None
    try:
        with _first_in_line(queue):
            while held is None:
                for i, fh in enumerate(handles):
                    try:
                        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:
                        continue
                    held = i
                    break
                else:
                    time.sleep(0.05)
        yield held
    finally:
        for fh in handles:
            fh.close()  # closing releases the lock held on it


@contextmanager
def every_slot(kind: str = "torch", count: int | None = None) -> Iterator[None]:
    """Hold all the slots of `kind`: no other such test runs meanwhile (the tests that judge
    rates against each other). Taken in order, blocking, so two takers cannot deadlock."""
    handles, queue = _open(kind, count)
    try:
        with _first_in_line(queue):
            for fh in handles:
                fcntl.flock(fh, fcntl.LOCK_EX)
        yield
    finally:
        for fh in handles:
            fh.close()
