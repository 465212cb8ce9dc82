"""Turns what rank 0 learned into a distdoctor Report and renders it with the shared renderers.

The JSON document is the same schema family as `check` (command "nccl-test"), with the
rendezvous, per-rank fingerprints, mesh matrix and bench rows under the extra top-level key
"nccl_test".
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any, Sequence

from distdoctor.api import skip
from distdoctor.model import CheckRun, Finding, RunContext, Status, worst
from distdoctor.model import exit_code as model_exit_code

TITLES = {
    "nccl-test.launch": "Launch and rendezvous address",
    "nccl-test.rendezvous": "Every rank arrives at the rendezvous",
    "nccl-test.ranks": "Ranks and what they run",
    "nccl-test.cross-rank": "Ranks agree on versions, GPUs and settings",
    "nccl-test.mesh": "Every host can connect to every other host, at a similar speed",
    "nccl-test.init": "Process group initializes",
    "nccl-test.all-reduce": "all_reduce gives the exact sum",
    "nccl-test.broadcast": "broadcast delivers rank 0's data",
    "nccl-test.all-gather": "all_gather collects every rank in order",
    "nccl-test.bench": "all_reduce bandwidth sweep",
    "nccl-test.localise": "Pair tests between hosts name the bad host or link",
}
TAGS = ("nccl-test",)


class Recorder:
    """The check runs known so far; thread-safe because the watchdog reads it while the main
    thread may still be writing."""

    def __init__(self) -> None:
        self._runs: dict[str, CheckRun] = {}
        self._lock = threading.Lock()
        self.extra: dict[str, Any] = {}

    def status(self, check_id: str) -> Status | None:
        with self._lock:
            run = self._runs.get(check_id)
        return run.status if run is not None else None

    def add(self, check_id: str, findings: Sequence[Finding], duration: float = 0.0,
            status: Status | None = None) -> None:
        findings = tuple(findings)
        run = CheckRun(check_id, TITLES[check_id], TAGS, status or worst(f.status for f in findings),
                       findings, duration, "distdoctor")
        with self._lock:
            self._runs[check_id] = run

    def findings(self, check_id: str) -> tuple[Finding, ...]:
        with self._lock:
            run = self._runs.get(check_id)
        return run.findings if run is not None else ()

    def has(self, check_id: str) -> bool:
        with self._lock:
            return check_id in self._runs

    def runs(self, wanted: Sequence[str], not_reached: str) -> list[CheckRun]:
        """Runs in report order; a wanted check that never ran is a SKIP saying why."""
        with self._lock:
            out = []
            for check_id in TITLES:
                if check_id in self._runs:
                    out.append(self._runs[check_id])
                elif check_id in wanted:
                    out.append(CheckRun(check_id, TITLES[check_id], TAGS, Status.SKIP,
                                        (skip(not_reached),), 0.0, "distdoctor"))
            return out


def exit_code(runs: Sequence[CheckRun]) -> int:
    return model_exit_code(runs, "fail")


def prepare(fmt: str) -> None:
    """Import what rendering needs before anything else runs: the watchdog may have to render
    while the main thread is inside `import torch`, holding Python's import lock."""
    import distdoctor.engine  # noqa: F401
    import distdoctor.redact  # noqa: F401

    if fmt == "json":
        import distdoctor.render.json  # noqa: F401
    else:
        import distdoctor.render.console  # noqa: F401


def build(runs: Sequence[CheckRun], host: str, context: RunContext, started_wall: float,
          duration: float):
    from distdoctor.engine import build_report

    return build_report(list(runs), host=host, context=context, started=started_wall, duration=duration,
                        command="nccl-test")


def render(report, fmt: str, verbose: bool, extra: dict[str, Any], to_file: bool = False) -> str:
    """The report in the formats and by the console rule every command shares."""
    if fmt == "json":
        from distdoctor.redact import redact
        from distdoctor.render import json as json_render

        return json_render.render(report, extra=redact(extra))
    if fmt == "prometheus":
        from distdoctor.render import prometheus

        return prometheus.render(report)
    from distdoctor.render import console as console_render

    return console_render.text_for(report, verbose, sys.stdout, os.environ, to_file)


def emit(text: str, path: str | None = None) -> None:
    """To stdout, or to -o PATH as `check` writes it; a report that cannot be written is said
    on stderr (the exit code stays the test's)."""
    from distdoctor import output

    sys.stdout.flush()
    try:
        output.write_report(text, path)
    except output.OutputError as exc:
        UNWRITTEN.append(str(exc))
        print(f"distdoctor nccl-test: {exc}", file=sys.stderr)


# Reports emit() could not write: the process then ends with EXIT_OUTPUT, whatever the test found
# (a verdict nobody can read is not a pass). A list, not a flag: the watchdog's thread may emit.
UNWRITTEN: list[str] = []


def final_code(code: int) -> int:
    from distdoctor.model import EXIT_OUTPUT

    return EXIT_OUTPUT if UNWRITTEN else code
