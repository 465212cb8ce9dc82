"""Ranks grouped by their main thread's stack: the largest group is the wave the job is in, the
others are outliers (ByteRobust, arXiv 2509.16293, does the same over all ranks' stacks).

Two ranks at the same place can differ in where inside a library they were caught (the
polling loop of a wait, a lock), so frames of installed packages and the standard library
count by function and file only; the job's own frames count with their line, since two
call sites of all_reduce in train.py are two different places in the program. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Sequence

from distdoctor.hang.stacks import Frame

# Where a rank waits for the others: frames of torch.distributed and of the MPI bindings.
COLLECTIVE_FILES = ("torch/distributed/", "mpi4py/", "horovod/", "deepspeed/comm/")


def python(frames: Sequence[Frame]) -> list[Frame]:
    """The Python frames: C/C++ ones (--native) are addresses that differ in every process."""
    return [f for f in frames if not f.native]


def signature(frames: Sequence[Frame]) -> tuple:
    return tuple((f.name, f.file, None if f.library else f.line) for f in frames if not f.native)


def in_collective(frames: Sequence[Frame]) -> bool:
    return any(f.file.startswith(COLLECTIVE_FILES) or "/torch/distributed/" in f.path for f in frames)


def place(frames: Sequence[Frame]) -> str:
    """`all_reduce at train.py:120`: the innermost function, at the innermost line of the job's
    own code (where in the program it was called from)."""
    frames = python(frames)
    if not frames:
        return "no Python frame"
    inner = frames[0]
    own = next((f for f in frames if not f.library), None)
    name = _collective_name(frames) or inner.name
    return f"{name} at {(own or inner).where()}"


def _collective_name(frames: Sequence[Frame]) -> str:
    """The torch.distributed function the job called (all_reduce, barrier), not the wrapper
    torch's logger puts around it: the outermost collective frame below the job's own code."""
    name = ""
    for f in frames:
        if f.file.startswith(COLLECTIVE_FILES) or "/torch/distributed/" in f.path:
            if "<locals>" not in f.name and f.name not in ("wrapper", "_exception_logger"):
                name = name or f.name
        elif not f.library:
            break
    return name


@dataclass
class Group:
    key: Hashable
    members: list  # the callers' records, in the order given
    frames: tuple[Frame, ...]
    collective: bool

    @property
    def size(self) -> int:
        return len(self.members)


def group(items: Sequence[tuple[object, Sequence[Frame]]]) -> list[Group]:
    """(record, frames) pairs grouped by signature; the wave first: the largest group, and of
    equal ones the group waiting in a collective (ranks that are ahead wait there; a rank
    that holds the job up is elsewhere), then the one met first."""
    groups: dict[tuple, Group] = {}
    for record, frames in items:
        key = signature(frames)
        g = groups.get(key)
        if g is None:
            g = groups[key] = Group(key, [], tuple(frames), in_collective(frames))
        g.members.append(record)
    order = list(groups.values())
    return sorted(order, key=lambda g: (-g.size, not g.collective, order.index(g)))
