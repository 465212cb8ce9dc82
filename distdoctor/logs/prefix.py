"""The prefixes launchers, loggers and pastes put in front of a log line, stripped and used.

Prefixes stack (`12: [1,12]<stderr>:[rank12]:[E1124 12:03:41.123456 1234 ProcessGroupNCCL.cpp:616]`),
so `split()` peels them off one at a time from the left until none matches, keeping what each
says: the host (NCCL's `host:pid:tid [dev]`, a syslog host, Ray's `ip=`), the rank (srun
--label, Open MPI --tag-output, horovodrun, torchrun, torch's `[rank3]:`, c10d's `[Rank N]`,
vLLM's `rank=N`), the time and the pid. Pure: text in, record out.

Rank precedence: the rank a process states about itself (torch's `[rank3]:` prefix, then
`[Rank 3]` or `rank 3 nranks 4` in the message) wins over a launcher's task label (srun
--label, mpirun --tag-output, horovodrun), which is a task or node index: with one torchrun per
node under `srun --label`, the label is the node and the message the rank.

Ambiguity kept on purpose: `12: text` is read as srun's label (a rank), `12 | text` and
`12\ttext` as a pasted viewer's line number.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass

from distdoctor.text import strip_ansi

_MONTHS = {m: i for i, m in enumerate(
    ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), start=1)}

# Each entry: (name, compiled pattern anchored at the start). Order matters only between
# patterns that could match the same text; the loop restarts from the top after each strip.
_D = r"(?P<y>\d{4})-(?P<mo>\d\d)-(?P<d>\d\d)"
_T = r"(?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)(?:[.,](?P<frac>\d{1,9}))?"
_LEVEL = r"(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)"
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("quote", re.compile(r"[ \t]*>[ \t]?")),
    ("viewer", re.compile(r"[ \t]*\d{1,7}(?:[ \t]*[|│][ \t]?|\t)|\[\d{1,7}\][ \t]+(?=[\[(])")),
    # Open MPI --tag-output, with --timestamp-output's date in front when asked
    ("mpi", re.compile(r"(?:[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4})?"
                       r"\[(?P<job>\d+),(?P<rank>\d+)\]<(?:stdout|stderr|stddiag)>:[ \t]?")),
    # horovodrun: `Fri Sep 25 16:52:53 2020[0]<stderr>:`
    ("horovodrun", re.compile(r"(?:[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4})?"
                              r"\[(?P<rank>\d+)\]<(?:stdout|stderr)>:[ \t]?")),
    # UCX `[host:pid:thread:tid] ` (older UCX: `[host:pid :thread]`) and Open MPI `[host:pid] `
    ("hostpid", re.compile(r"\[(?P<host>[A-Za-z][\w.-]*):(?P<pid>\d+)(?: ?:\d+(?::\d+)?)?\][ \t]*")),
    # UCX's own clock, seconds since the epoch: `[1506866470.744682] [host:pid :0]`
    ("epoch", re.compile(r"\[(?P<epoch>1\d{9})\.(?P<frac>\d{1,9})\][ \t]+(?=\[)")),
    # MPICH's `mpiexec -l`: `[1]text` (no space; NCCL's `[0] ` device tag has one), and a
    # launcher's `[155] ` rank label in front of NCCL's own `host:pid:tid [dev] ` prefix
    ("hydra", re.compile(r"\[(?P<rank>\d{1,6})\](?:(?=[^\s<\d])|[ \t](?=[A-Za-z0-9][\w.-]*:\d+:\d+ \[\d+\] ))")),
    # Ray and vLLM workers: `(pid=81332)`, `(RayWorkerWrapper pid=92234, ip=172.19.24.110)`,
    # `(VllmWorker rank=0 pid=496819)`, `(raylet)`, `(raylet, ip=10.0.0.2)`
    ("ray", re.compile(r"\((?:[\w.-]+(?: rank=(?P<rank>\d+))? )?pid=(?P<pid>\d+)"
                       r"(?:, ip=(?P<ip>[0-9A-Fa-f.:]+))?[^()]{0,200}\)[ \t]*"
                       r"|\((?:raylet|gcs_server|autoscaler|monitor)(?:, ip=(?P<ip2>[0-9A-Fa-f.:]+))?\)[ \t]*")),
    # a runner's host and stream: `node-a.cn-d004 [stderr] `
    ("stream", re.compile(r"(?P<host>[A-Za-z0-9][\w.-]*) \[(?:stdout|stderr)\][ \t]*")),
    # docker compose: `trainer_1  | `, `worker-2 | `
    ("compose", re.compile(r"(?P<host>[a-z0-9][\w.-]*?[-_]\d+)[ \t]+\|[ \t]?")),
    # vLLM and Python logging: `ERROR 07-24 04:24:50 file.py:226] `, `INFO 10-17 02:19:27 [file.py:654] `
    ("pylog", re.compile(_LEVEL + r" (?P<mo>\d\d)-(?P<d>\d\d) " + r"(?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)"
                         r"(?:[.,](?P<frac>\d{1,9}))? \[?[\w./-]+:\d+\][ \t]*")),
    # `torch.distributed.elastic.multiprocessing.api: [ERROR] `, `[WARNING] `, `ERROR:torch...api:`
    ("pylevel", re.compile(r"(?:[\w.]+: )?\[" + _LEVEL + r"\][ \t]*|" + _LEVEL.replace("level", "level2")
                           + r":(?:[\w.]+):(?=\S)")),
    # TensorFlow / glog without a date: `W tensorflow/core/framework/op_kernel.cc:1651] `
    ("tflog", re.compile(r"(?P<level>[IWEF]) [\w./-]+\.\w+:\d+\][ \t]*")),
    # torchrun's `[default3]:` is the local rank; torch's own `[rank3]:` the global rank
    ("torchrun", re.compile(r"\[(?:(?:default|worker)(?P<lrank>\d+)|rank(?P<grank>\d+))\](?::|(?= ))[ \t]?")),
    ("srun", re.compile(r"[ \t]*(?P<rank>\d{1,6}): ")),
    ("iso", re.compile(r"\[?" + _D + r"[T ]" + _T + r"(?:Z|[+-]\d\d:?\d\d)?\]?(?: [+-]\d{4})?[ \t]*(?:[|:-][ \t]+)?")),
    # a paste's own clock, to the minute: `2025-02-18 12:54 [rank13]:`
    ("isomin", re.compile(_D + r" (?P<h>\d\d):(?P<mi>\d\d)[ \t]+(?=\[)")),
    ("syslog", re.compile(r"(?P<mon>[A-Z][a-z]{2}) {1,2}(?P<d>\d{1,2}) " + _T +
                          r"(?: (?P<host>[A-Za-z0-9][\w.-]*) (?P<prog>[\w./-]+)(?:\[(?P<pid>\d+)\])?:)?[ \t]*")),
    ("glog", re.compile(r"\[?(?P<level>[IWEF])(?P<mo>\d{1,2})(?P<d>\d\d) " + _T +
                        r"(?:\s+(?P<pid>\d+))?\s+[\w./-]+:\d+\][ \t]*")),
    ("c10d", re.compile(r"\[(?P<level>[IWEF]) [\w./-]+:\d+\][ \t]*")),
    ("clock", re.compile(r"\[" + _T + r"\][ \t]*")),
    ("nccl", re.compile(r"(?P<host>[A-Za-z0-9][\w.-]*):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] ")),
    ("indent", re.compile(r"[ \t]+")),
)
# Anchored explicitly: they are used with .match, and `^` also keeps a search (or a pattern that
# starts with [ \t]*) linear on a 64 KiB line of blanks, where each start position rescanned it.
_PATTERNS = tuple((name, re.compile(rf"^(?:{pattern.pattern})", pattern.flags)) for name, pattern in _PATTERNS)
_DIGITS, _UPPER, _LOWER = "0123456789", "ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz"
# The characters each prefix can start with. A line is tried only against the prefixes its
# first character allows: the peel loop runs on every line of small inputs and on a sample of
# large ones, and trying every pattern at every peel costs more than the rest of the scan.
# tests/unit/logs/test_prefix.py checks that the dispatch splits every line of tests/data as the
# full loop does.
_FIRST = {
    "quote": " \t>", "viewer": " \t[" + _DIGITS, "mpi": "[" + _UPPER, "horovodrun": "[" + _UPPER, "hydra": "[",
    "hostpid": "[", "epoch": "[", "ray": "(", "stream": _UPPER + _LOWER + _DIGITS, "compose": _LOWER + _DIGITS,
    "pylog": "DIWECF", "pylevel": _UPPER + _LOWER + _DIGITS + "_.[", "tflog": "IWEF", "torchrun": "[",
    "srun": " \t" + _DIGITS, "iso": "[" + _DIGITS, "isomin": _DIGITS, "syslog": _UPPER, "glog": "[IWEF",
    "c10d": "[", "clock": "[", "nccl": _UPPER + _LOWER + _DIGITS, "indent": " \t",
}
_BY_FIRST = {chr(c): tuple((n, p) for n, p in _PATTERNS if chr(c) in _FIRST[n]) for c in range(128)}
# torch's ProcessGroupNCCL says whose group it destroys as its process ends on an NCCL error
_BODY_RANK = re.compile(r"\[Rank (?P<rank>\d+)\]|\brank (?P<nrank>\d+) nranks \d+|"
                        r"^Process Group destroyed on rank (?P<drank>\d+)$")
# srun and slurmstepd report on a task's behalf: "srun: error: node2: task 1: Killed",
# "srun: error: node2: tasks 0-3: Exited with exit code 1", "*** STEP 3.0 ON node1 CANCELLED AT ..."
_SLURM_WHO = re.compile(r"^srun: error: (?P<host>[A-Za-z0-9][\w.-]*): tasks? (?P<rank>\d+)|"
                        r"\*\*\* (?:STEP|JOB) \S+ ON (?P<host2>[A-Za-z0-9][\w.-]*) CANCELLED")


@dataclass(frozen=True)
class Prefixed:
    body: str
    host: str = ""
    rank: int | None = None
    local_rank: int | None = None
    pid: int | None = None
    device: int | None = None
    time: tuple[int, int, int, float] | None = None  # (year or 0, month or 0, day or 0, seconds of day)
    time_text: str = ""
    level: str = ""  # glog / c10d letter: I W E F


def _seconds(m: re.Match[str]) -> float:
    frac = m.groupdict().get("frac") or ""
    secs = m.groupdict().get("s") or "0"
    return int(m.group("h")) * 3600 + int(m.group("mi")) * 60 + int(secs) + (float("0." + frac) if frac else 0.0)


def split(line: str, dispatch: bool = True) -> Prefixed:
    """Peel every known prefix off line. Never raises; an unknown shape is all body.
    dispatch=False tries every pattern at every peel (the reference the dispatch is tested by)."""
    text = line.rstrip("\r\n")
    text = strip_ansi(text)
    host = ""
    rank = label = local_rank = pid = device = None
    when = None
    when_text = level = ""
    for _ in range(12):  # bound the stacking; 12 prefixes deep is already absurd
        if not text:
            break
        for name, pattern in (_BY_FIRST.get(text[0], _PATTERNS) if dispatch else _PATTERNS):
            m = pattern.match(text)
            if m is None or m.end() == 0:
                continue
            if name == "quote":
                pass
            elif name in ("mpi", "srun", "horovodrun", "hydra"):
                if label is None:
                    label = int(m.group("rank"))
            elif name == "ray":
                pid = int(m.group("pid")) if m.group("pid") else pid
                host = host or m.group("ip") or m.group("ip2") or ""
                if m.group("rank") is not None and rank is None:
                    rank = int(m.group("rank"))
            elif name == "hostpid":
                host = host or m.group("host")
                pid = int(m.group("pid"))
            elif name in ("stream", "compose"):
                host = host or m.group("host")
            elif name in ("pylevel", "tflog"):
                found = m.group("level") or (m.group("level2") if name == "pylevel" else "") or ""
                level = level or found[:1]
            elif name == "torchrun":
                if m.group("lrank") is not None:
                    local_rank = int(m.group("lrank"))
                elif rank is None:
                    rank = int(m.group("grank"))
            elif name == "nccl":
                host = host or m.group("host")
                pid = int(m.group("pid"))
                device = int(m.group("dev"))
            elif name in ("iso", "isomin", "syslog", "glog", "clock", "pylog"):
                if when is None:
                    year = int(m.group("y")) if "y" in m.re.groupindex else 0
                    if "mon" in m.re.groupindex:
                        month = _MONTHS.get(m.group("mon").lower(), 0)
                    else:
                        month = int(m.group("mo")) if "mo" in m.re.groupindex else 0
                    day = int(m.group("d")) if "d" in m.re.groupindex else 0
                    when = (year, month, day, _seconds(m))
                    when_text = f"{m.group('h')}:{m.group('mi')}:{m.groupdict().get('s') or '00'}"
                if "level" in m.re.groupindex and m.group("level"):
                    level = m.group("level")[:1]
                if "host" in m.re.groupindex and m.group("host"):
                    host = host or m.group("host")
                if "pid" in m.re.groupindex and m.group("pid"):
                    pid = int(m.group("pid"))
            elif name == "epoch":
                if when is None:
                    stamp = datetime.datetime.fromtimestamp(int(m.group("epoch")), datetime.timezone.utc)
                    secs = stamp.hour * 3600 + stamp.minute * 60 + stamp.second
                    when = (stamp.year, stamp.month, stamp.day, secs + float("0." + m.group("frac")))
                    when_text = f"{stamp.hour:02d}:{stamp.minute:02d}:{stamp.second:02d}"
            elif name == "c10d":
                level = m.group("level")
            elif name == "indent" and m.end() == len(text):
                break
            text = text[m.end():]
            break
        else:
            break
    b = _BODY_RANK.search(text) if ("ank " in text) else None
    if b is not None and rank is None:
        rank = int(b.group("rank") or b.group("nrank") or b.group("drank"))
    if "srun: error: " in text or "***" in text:
        w = _SLURM_WHO.search(text)
        if w is not None:
            host = host or w.group("host") or w.group("host2")
            if label is None and w.group("rank") is not None:
                label = int(w.group("rank"))
    if rank is None:
        rank = label
    return Prefixed(text, host, rank, local_rank, pid, device, when, when_text, level)


_TORCHRUN_DIR = re.compile(r"(?:^|/)attempt_\d+/(?P<rank>\d+)/(?:stdout|stderr|error)\.(?:log|json)$")
_RANK_NAME = re.compile(r"(?:^|[/_.-])rank[_-]?(?P<rank>\d+)(?:[/_.-]|$)", re.IGNORECASE)


def rank_from_path(path: str) -> int | None:
    """A file named for its rank: `rank3.log`, `train_rank_12.txt`."""
    m = _RANK_NAME.search(path.replace("\\", "/"))
    return int(m.group("rank")) if m else None


def local_rank_from_path(path: str) -> int | None:
    """torchrun's log folder, `<dir>/<run>/attempt_0/3/stderr.log`: the local rank on its node."""
    m = _TORCHRUN_DIR.search(path.replace("\\", "/"))
    return int(m.group("rank")) if m else None
