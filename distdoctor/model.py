"""The records every part of distdoctor passes around: plain frozen dataclasses, no behaviour."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from distdoctor.remote import Fix, render_all


class Status(str, enum.Enum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"
    # Only the engine assigns these two: a check cannot claim to have crashed or hung.
    ERROR = "error"
    TIMEOUT = "timeout"

    @property
    def severity(self) -> int:
        return _SEVERITY[self]


# SKIP ranks below OK so that a check mixing OK and SKIP findings reads as OK.
_SEVERITY = {
    Status.SKIP: 0,
    Status.OK: 1,
    Status.WARN: 2,
    Status.FAIL: 3,
    Status.ERROR: 4,
    Status.TIMEOUT: 4,
}


# Exit codes of every command. They live with the report model, not the CLI, so that every
# command (check, nccl-test, fleet, log, health) derives its code from its runs the same way.
EXIT_OK = 0
EXIT_FAIL = 1
EXIT_ERROR = 2
EXIT_USAGE = 64
EXIT_OUTPUT = 74
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a program ended by Ctrl-C
EXIT_HANGUP = 129  # 128 + SIGHUP (the terminal or ssh session went away)
EXIT_TERMINATED = 143  # 128 + SIGTERM (Slurm's health check or a timeout(1) wrapper gave up)

EXIT_CODES_HELP = """\
exit codes:
  0   nothing worse than WARN (nothing worse than OK with --fail-on warn)
  1   at least one FAIL (or a WARN with --fail-on warn)
  2   no FAIL, but a check ended in ERROR or TIMEOUT: the result is incomplete
  64  usage error: bad arguments or a malformed config file
  74  the report could not be written (-o FILE)
  129 hung up (SIGHUP: the terminal or ssh session went away): the report shows what finished
  130 interrupted (SIGINT, Ctrl-C): the report shows what finished, the rest as ERROR
  143 terminated (SIGTERM): likewise
"""


def exit_code(runs, fail_on: str = "fail") -> int:
    """The documented exit code for a set of check runs (see EXIT_CODES_HELP)."""
    statuses = {r.status for r in runs}
    if Status.FAIL in statuses:
        return EXIT_FAIL
    if statuses & {Status.ERROR, Status.TIMEOUT}:
        return EXIT_ERROR
    if fail_on == "warn" and Status.WARN in statuses:
        return EXIT_FAIL
    return EXIT_OK


def worst(statuses) -> Status:
    result = Status.SKIP
    for status in statuses:
        if status.severity > result.severity:
            result = status
    return result


# Called with every finding that carries a fix, as it is made: the test suite lints them all
# (tests/conftest.py). Nothing in the product watches.
FIX_WATCHERS: list[Callable[["Finding"], None]] = []


def remedy_of(fix: "str | Fix | Sequence[str | Fix] | None") -> tuple[str, tuple[Fix, ...]]:
    """(text, records) for a fix given as a string (a pack's own, printed as it is), a Fix
    record, or several of either in order."""
    if not fix:
        return "", ()
    if isinstance(fix, str):
        return fix, ()
    parts: Iterable[str | Fix] = (fix,) if isinstance(fix, Fix) else fix
    records = tuple(dict.fromkeys(Fix(tuple(p.splitlines())) if isinstance(p, str) else p for p in parts if p))
    return render_all(records), records


@dataclass(frozen=True)
class Finding:
    """fix is the text printed and written to JSON; remedy the records it was rendered from
    (empty when a check gave the text itself, as a pack may: `fix="..."`). Passing a Fix, or a
    list of Fix records and strings, as fix fills both."""

    status: Status
    summary: str
    subject: str = ""
    explanation: str = ""
    fix: str = ""
    evidence: Mapping[str, Any] = field(default_factory=dict)
    # What the node needs (distdoctor/hardware/actions.py: none, fix-config, restart-app,
    # app-error, reset-gpu, reboot, replace-hardware); "" where a finding names no such thing.
    action: str = ""
    remedy: tuple[Fix, ...] = field(default=(), kw_only=True)  # by name only, never taken for action

    def __post_init__(self):
        if not isinstance(self.fix, str) or (self.remedy and not self.fix):
            text, records = remedy_of(self.fix or self.remedy)  # type: ignore[arg-type]
            object.__setattr__(self, "fix", text)
            object.__setattr__(self, "remedy", records)
        if self.fix:
            for watch in FIX_WATCHERS:
                watch(self)

    def to_dict(self) -> dict:
        out: dict[str, Any] = {
            "status": self.status.value,
            "summary": self.summary,
            "subject": self.subject,
            "explanation": self.explanation,
            "fix": self.fix,
            "evidence": dict(self.evidence),
        }
        if self.action:
            out["action"] = self.action
        if self.remedy:
            out["remedy"] = [r.to_dict() for r in self.remedy]
        return out


@dataclass(frozen=True)
class CheckInfo:
    id: str
    title: str
    func: Callable[..., Any]
    tags: tuple[str, ...] = ()
    timeout: float = 10.0
    params: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""
    source: str = ""  # where it was loaded from: an entry point or a drop-in file

    @property
    def area(self) -> str:
        return self.id.split(".", 1)[0]

    def with_source(self, source: str) -> "CheckInfo":
        return CheckInfo(self.id, self.title, self.func, self.tags, self.timeout,
                         self.params, self.description, source)


@dataclass(frozen=True)
class CheckRun:
    id: str
    title: str
    tags: tuple[str, ...]
    status: Status
    findings: tuple[Finding, ...]
    duration: float
    source: str = ""

    @property
    def area(self) -> str:
        return self.id.split(".", 1)[0]


@dataclass(frozen=True)
class RunContext:
    """Where this process runs inside a job, as far as the environment tells."""

    kind: str  # none, login, slurm-allocation, slurm-batch, slurm-step, mpirun, torchrun
    description: str
    launcher: str = ""
    rank: int | None = None
    local_rank: int | None = None
    world_size: int | None = None
    local_world_size: int | None = None
    node_rank: int | None = None
    job_id: str = ""
    step_id: str = ""

    def to_dict(self) -> dict:
        return {
            "kind": self.kind,
            "description": self.description,
            "launcher": self.launcher,
            "rank": self.rank,
            "local_rank": self.local_rank,
            "world_size": self.world_size,
            "local_world_size": self.local_world_size,
            "node_rank": self.node_rank,
            "job_id": self.job_id,
            "step_id": self.step_id,
        }


@dataclass(frozen=True)
class Report:
    tool_version: str
    host: str
    context: RunContext
    started_at: str  # ISO-8601 UTC
    duration: float
    runs: tuple[CheckRun, ...]
    command: str = "check"

    def counts(self) -> dict[str, int]:
        counts = {status.value: 0 for status in Status}
        for run in self.runs:
            counts[run.status.value] += 1
        return counts

    @property
    def status(self) -> Status:
        return worst(run.status for run in self.runs)
