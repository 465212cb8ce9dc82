"""Each rank's Python stacks through py-spy (`py-spy dump --json --nonblocking`).

py-spy rather than pystack: one static binary in a wheel with no dependencies (pystack needs
libdw/libelf at run time), and `--nonblocking` reads the target's memory while it runs, where
pystack always stops the process (SIGSTOP through ptrace) for the length of the dump. A hung
job must not be made to lose more time because it was looked at. `--native` (C/C++ frames)
needs the process paused, so it is only used when asked for.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import NamedTuple

DUMP_TIMEOUT = 5.0
# What one rank's dump may hold: a py-spy stand-in (or a broken py-spy) can print anything up to
# the host's 16 MiB output bound, and each rank's snapshot crosses srun or ssh.
MAX_THREADS = 512
MAX_FRAMES = 256
MAX_WORD = 300

# What py-spy says when it cannot read a process, and what that means for the finding.
_ERRORS = (
    ("permission denied", "denied"),
    ("operation not permitted", "denied"),
    ("check that the process is running", "gone"),
    ("no such process", "gone"),
    ("no such file or directory", "gone"),
    ("failed to find python version", "not python"),
    ("failed to find a python interpreter", "not python"),
    ("failed to get python", "not python"),
)


class Frame(NamedTuple):  # a tuple, not a dataclass: 4,096 ranks x 30 frames are built per verdict
    name: str
    file: str  # py-spy's short_filename: the path below site-packages, or the script's name
    line: int
    path: str = ""  # the full file name

    @property
    def library(self) -> bool:
        """A frame of an installed package or the standard library, not of the job's own code."""
        p = self.path or self.file
        return ("/site-packages/" in p or "/dist-packages/" in p or "/lib/python3" in p
                or p.startswith("<frozen"))

    @property
    def native(self) -> bool:
        """A C/C++ frame (py-spy --native): a shared object and an address or symbol, which
        differ from process to process (ASLR), so they never group ranks."""
        p = self.path or self.file
        return not (p.endswith((".py", ".pyx")) or p.startswith("<"))

    def where(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class Thread:
    name: str
    tid: int
    frames: tuple[Frame, ...]  # innermost first
    active: bool = False


@dataclass
class StackDump:
    pid: int
    threads: list[Thread] = field(default_factory=list)
    error: str = ""  # "", "missing", "denied", "gone", "not python", "timeout", "failed", "garbled"
    detail: str = ""  # the tool's own last line, or how it ended
    duration: float = 0.0

    def main(self) -> Thread | None:
        """The thread the rank's training loop runs in: MainThread, else the thread whose id is
        the pid, else the first."""
        for thread in self.threads:
            if thread.name == "MainThread":
                return thread
        for thread in self.threads:
            if thread.tid == self.pid:
                return thread
        return self.threads[0] if self.threads else None

    def to_dict(self) -> dict:
        return {"pid": self.pid, "error": self.error, "detail": self.detail, "duration": round(self.duration, 3),
                "threads": [{"name": t.name, "tid": t.tid, "active": t.active,
                             "frames": [[f.name, f.file, f.line, f.path] for f in t.frames]} for t in self.threads]}

    @classmethod
    def from_dict(cls, doc: dict) -> "StackDump":
        threads = []
        for t in doc.get("threads") or []:
            frames = tuple(_frame(f) for f in t.get("frames") or ())
            threads.append(Thread(str(t.get("name", "")), int(t.get("tid") or 0), frames, bool(t.get("active"))))
        return cls(int(doc.get("pid") or 0), threads, str(doc.get("error", "")), str(doc.get("detail", "")),
                   float(doc.get("duration") or 0.0))


_FRAMES: dict[tuple, Frame] = {}


def _frame(raw) -> Frame:
    """A frame from its snapshot form, shared: thousands of ranks hold the same frames."""
    key = tuple(raw)
    frame = _FRAMES.get(key)
    if frame is None:
        if len(_FRAMES) > 200_000:
            _FRAMES.clear()
        frame = _FRAMES[key] = Frame(str(raw[0]), str(raw[1]), int(raw[2]), str(raw[3]) if len(raw) > 3 else "")
    return frame


class StackParseError(ValueError):
    pass


def parse_pyspy_json(text: str, pid: int) -> list[Thread]:
    """`py-spy dump --json` output: a list of threads, each with frames innermost first."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise StackParseError(f"py-spy printed something that is not JSON: {str(exc)[:200]}") from None
    except RecursionError:
        raise StackParseError("py-spy printed JSON nested deeper than any stack") from None
    if not isinstance(doc, list):
        raise StackParseError("py-spy's JSON is not a list of threads")
    threads = []
    for item in doc[:MAX_THREADS]:
        if not isinstance(item, dict) or not isinstance(item.get("frames"), list):
            raise StackParseError("a thread in py-spy's JSON has no frame list")
        frames = []
        for f in item["frames"][:MAX_FRAMES]:
            if not isinstance(f, dict):
                continue
            line = f.get("line")
            frames.append(Frame(_word(f.get("name")) or "?", _word(f.get("short_filename") or f.get("filename")) or "?",
                                line if isinstance(line, int) else 0, _word(f.get("filename"))))
        tid = item.get("os_thread_id") or item.get("thread_id") or 0
        threads.append(Thread(_word(item.get("thread_name")), tid if isinstance(tid, int) else 0, tuple(frames),
                              item.get("active") is True))
    return threads


def _word(value) -> str:
    """A name or path py-spy printed, as text of a sane length ('' when it is not text)."""
    return value[:MAX_WORD] if isinstance(value, str) else ""


def classify(stderr: str) -> tuple[str, str]:
    """(kind, the line that says it) of a py-spy failure."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    said = next((line for line in lines if line.startswith("Error:")), lines[0] if lines else "")
    lowered = stderr.lower()
    for needle, kind in _ERRORS:
        if needle in lowered:
            return kind, said
    return "failed", said


def find_pyspy(host) -> str | None:
    """py-spy on PATH, else beside this interpreter (a venv's bin/, where pip installs it)."""
    found = host.which("py-spy")
    if found:
        return found
    beside = os.path.join(os.path.dirname(host.python_executable()), "py-spy")
    return beside if host.exists(beside) else None


def dump(host, pid: int, pyspy: str | None, native: bool = False, timeout: float = DUMP_TIMEOUT) -> StackDump:
    if pyspy is None:
        return StackDump(pid, error="missing", detail="py-spy is not installed")
    argv = [pyspy, "dump", "--pid", str(pid), "--json"]
    argv.append("--native" if native else "--nonblocking")
    res = host.run(argv, timeout=timeout)
    if res.timed_out:
        return StackDump(pid, error="timeout", detail=f"py-spy did not answer within {timeout:g} s and was killed",
                         duration=res.duration)
    if res.missing:
        return StackDump(pid, error="missing", detail="py-spy is not installed", duration=res.duration)
    if res.returncode != 0:
        if res.returncode is None and res.error:  # flooded: killed past the output bound
            return StackDump(pid, error="garbled", detail=f"py-spy {res.error}", duration=res.duration)
        kind, said = classify((res.stderr or res.stdout)[:MAX_WORD * 64])
        return StackDump(pid, error=kind, detail=(said or res.describe())[:MAX_WORD], duration=res.duration)
    try:
        threads = parse_pyspy_json(res.stdout, pid)
    except StackParseError as exc:
        return StackDump(pid, error="garbled", detail=str(exc), duration=res.duration)
    return StackDump(pid, threads, duration=res.duration)
