"""One node's snapshot of its ranks: who they are, their state, their stacks, their Flight
Recorder traces. The part that runs on every node (under srun for --job); the verdict is drawn
from the snapshots of all nodes (verdict.py). A snapshot is plain JSON.

Bounded: every rank is read on its own daemon thread, py-spy runs under its own timeout, and
the whole collection under `budget`; a rank not done by then is reported as such.
"""

from __future__ import annotations

import functools
import time
from typing import Any

from distdoctor import bounded
from distdoctor.hang import discovery, gpuwait, procstate, ptrace, stacks

CPU_WINDOW = 0.5  # seconds between the two CPU samples
SNAPSHOT_VERSION = 1
SOURCE_MAX_BYTES = 2 * 1024 * 1024  # a script longer than this is not read for its line


def _read_rank(host, rank: discovery.RankProcess, pyspy: str | None, native: bool, dump_timeout: float,
               before: procstate.Stat | None, started: float) -> dict:
    dump = stacks.dump(host, rank.pid, pyspy, native=native, timeout=dump_timeout) if rank.python else \
        stacks.StackDump(rank.pid, error="not python", detail=f"{' '.join(rank.cmdline[:2]) or 'the process'} "
                                                              f"is not a Python interpreter")
    wait = CPU_WINDOW - (time.monotonic() - started)
    if wait > 0:
        host.sleep(wait)
    after = procstate.read_stat(host, rank.pid)
    if after is not None and after.start_ticks != rank.start_ticks:
        after = None  # the pid was reused by another process
    try:
        usr1 = procstate.usr1_disposition(host.read_text(f"/proc/{rank.pid}/status", max_bytes=16384) or "") \
            if after else ""
    except OSError:
        usr1 = ""
    return {"stack": dump.to_dict(), "state": {
        "code": _source_line(host, dump),
        "alive": after is not None and after.state not in ("Z", "X"),
        "state": after.state if after else "",
        "wchan": procstate.read_wchan(host, rank.pid) if after else "",
        "threads": after.threads if after else 0,
        "usr1": usr1,
        "cpu_percent": procstate.cpu_percent(before, after, max(CPU_WINDOW, time.monotonic() - started)),
    }}


def _source_line(host, dump: stacks.StackDump) -> str:
    """The text of the line the rank's main thread is at, when that is the job's own code: it says
    whether a rank at 100% CPU computes or spins waiting for its GPU (gpuwait.py). One bounded read
    of a file the rank itself runs; nothing when it cannot be read."""
    thread = dump.main()
    frame = gpuwait.source_frame(thread.frames) if thread else None
    if frame is None or not frame.path.endswith(".py"):
        return ""
    try:
        text = host.read_text(frame.path, max_bytes=SOURCE_MAX_BYTES)
    except (OSError, ValueError):
        return ""
    return gpuwait.line_of(text or "", frame.line)


def snapshot(host, pids: list[int] | None = None, job: str | None = None, native: bool = False,
             budget: float = 8.0, node_name: str | None = None,
             query_ras: bool = True) -> dict[str, Any]:
    started = time.monotonic()
    found = discovery.discover(host, pids=pids, job=job, node_name=node_name)
    permission = ptrace.check(host, [r.pid for r in found.ranks])
    pyspy = stacks.find_pyspy(host)
    dump_timeout = max(1.0, min(stacks.DUMP_TIMEOUT, budget - 1.0))
    pending: dict[int, bounded.Pending[dict]] = {}
    t0 = time.monotonic()
    for rank in found.ranks:
        before = procstate.read_stat(host, rank.pid)
        pending[rank.pid] = bounded.start(functools.partial(_read_rank, host, rank, pyspy, native, dump_timeout,
                                                            before, t0), name=f"hang pid {rank.pid}")
    deadline = started + budget
    ranks = []
    for rank in found.ranks:
        try:
            got = pending[rank.pid].wait(deadline - time.monotonic())
        except Exception as exc:  # noqa: BLE001 -- a bug reading one rank must not lose the others
            got = {"stack": stacks.StackDump(rank.pid, error="failed", detail=f"{type(exc).__name__}: {exc}").to_dict()}
        if isinstance(got, bounded.TimedOut):
            got = {}
        entry: dict[str, Any] = {"process": rank.to_dict()}
        entry["stack"] = got.get("stack") or stacks.StackDump(
            rank.pid, error="timeout", detail=f"not read within the node's bound of {budget:g} s").to_dict()
        entry["state"] = got.get("state") or {"alive": True, "state": "", "wchan": "", "threads": 0, "cpu_percent": None}
        ranks.append(entry)
    doc: dict[str, Any] = {
        "hang_snapshot": SNAPSHOT_VERSION, "node": host.hostname(), "ranks": ranks,
        "problems": list(found.problems), "unreadable": found.unreadable,
        "ptrace": {"allowed": permission.allowed, "why": permission.why, "fix": permission.fix},
        "pyspy": pyspy or "", "duration": 0.0,
    }
    if found.ranks:
        from distdoctor.hang import flightrec

        doc["flight_recorder"] = flightrec.collect(host, found.ranks)
        # RAS answers for the whole job: under --job only the step's first node asks it
        if query_ras and host.env.get("SLURM_NODEID", "0") == "0":
            from distdoctor.hang import ras

            nccl = ras.collect(host, found.ranks, host.env, budget=max(0.0, started + budget - time.monotonic()))
            if nccl is not None:
                doc["ras"] = nccl
    doc["duration"] = round(time.monotonic() - started, 3)
    return doc
