"""A process's state from /proc, read without touching the process: /proc/<pid>/stat (state,
parent, CPU ticks, threads, start time), /proc/<pid>/wchan (where the kernel has it waiting)
and /proc/<pid>/cmdline. Parsers are pure; `read` and `sample_cpu` go through the host."""

from __future__ import annotations

from dataclasses import dataclass

CLOCK_TICKS = 100  # USER_HZ: 100 on every Linux architecture distdoctor runs on

STATES = {
    "R": "running", "S": "sleeping", "D": "uninterruptible sleep (D)", "Z": "zombie", "T": "stopped",
    "t": "stopped by a tracer", "X": "dead", "I": "idle",
}


@dataclass(frozen=True)
class Stat:
    pid: int
    comm: str
    state: str
    ppid: int
    cpu_ticks: int  # utime + stime
    threads: int
    start_ticks: int  # since boot


class StatError(ValueError):
    pass


def parse_stat(text: str) -> Stat:
    """/proc/<pid>/stat. comm sits in parentheses and may itself hold spaces and ')', so the
    fields are counted from the last ')'."""
    head, sep, tail = text.rpartition(")")
    if not sep or "(" not in head:
        raise StatError(f"not a /proc/<pid>/stat line: {text[:80]!r}")
    pid_text, _, comm = head.partition("(")
    fields = tail.split()
    try:
        return Stat(int(pid_text), comm, fields[0], int(fields[1]), int(fields[11]) + int(fields[12]),
                    int(fields[17]), int(fields[19]))
    except (IndexError, ValueError):
        raise StatError(f"/proc/<pid>/stat has too few or non-numeric fields: {text[:80]!r}") from None


def parse_cmdline(raw: bytes) -> list[str]:
    return [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]


def read_stat(host, pid: int) -> Stat | None:
    """None when the process is gone (or its stat is unreadable or garbled)."""
    try:
        text = host.read_text(f"/proc/{pid}/stat", max_bytes=4096)
    except OSError:
        return None
    if not text:
        return None
    try:
        return parse_stat(text)
    except StatError:
        return None


def read_wchan(host, pid: int) -> str:
    try:
        text = host.read_text(f"/proc/{pid}/wchan", max_bytes=256)
    except OSError:
        return ""
    text = (text or "").strip()
    return "" if text == "0" else text


def cpu_percent(before: Stat | None, after: Stat | None, seconds: float) -> float | None:
    """CPU use between two samples as a percentage of one core (a busy multithreaded rank can
    show more than 100)."""
    if before is None or after is None or seconds <= 0 or before.start_ticks != after.start_ticks:
        return None
    return round(100.0 * (after.cpu_ticks - before.cpu_ticks) / CLOCK_TICKS / seconds, 1)


SIGUSR1 = 10


def usr1_disposition(status_text: str) -> str:
    """What SIGUSR1 would do to the process, from /proc/<pid>/status: "caught" (a handler),
    "blocked" (a thread waits for it with sigwait, or it stays pending), "ignored", or ""
    (the default: the process is killed). Only the first two make `kill -USR1` a dump request
    rather than the end of the job."""
    masks = {}
    for line in status_text.splitlines():
        key, _, value = line.partition(":")
        if key in ("SigCgt", "SigBlk", "SigIgn"):
            try:
                masks[key] = int(value.strip(), 16)
            except ValueError:
                pass
    bit = 1 << (SIGUSR1 - 1)
    for key, name in (("SigCgt", "caught"), ("SigBlk", "blocked"), ("SigIgn", "ignored")):
        if masks.get(key, 0) & bit:
            return name
    return ""
