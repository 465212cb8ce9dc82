"""Runs checks in parallel on daemon threads, each under its deadline, and builds the Report.

A hung `nvidia-smi` or a blackholed host is the normal case on a sick cluster: a check past
its deadline is reported TIMEOUT and abandoned (daemon threads never keep the process alive),
a check that raises becomes one ERROR finding, and a check that prints to stdout is caught and
reported. One bad check never sinks the run.
"""

from __future__ import annotations

import io
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable, Iterable, Mapping

from distdoctor import __version__
from distdoctor.api import Context, ProbeTimeout
from distdoctor.hardware.actions import is_action
from distdoctor.model import (
    CheckInfo,
    CheckRun,
    Finding,
    Report,
    RunContext,
    Status,
    worst,
)
from distdoctor.redact import redact
from distdoctor.render.json import json_safe


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived (the CLI's handlers raise it in the main thread). From
    run_checks it carries `runs`: what finished, and every other check as ERROR."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.signal_name = signal.Signals(signum).name
        self.runs: list[CheckRun] = []


class _ThreadRoutedStream(io.TextIOBase):
    """Stands in for sys.stdout while checks run: writes from a check's thread go to that
    check's buffer, everything else to the real stream. Keeps a chatty check from corrupting
    JSON on stdout."""

    def __init__(self, real):
        self.real = real
        self.buffers: dict[int, io.StringIO] = {}

    def write(self, text: str) -> int:
        buf = self.buffers.get(threading.get_ident())
        if buf is not None:
            return buf.write(text)
        return self.real.write(text)

    def flush(self) -> None:
        self.real.flush()


@dataclass
class _Job:
    info: CheckInfo
    ctx: Context
    timeout: float
    thread: threading.Thread | None = None
    started: float = 0.0
    findings: list | None = None
    error: BaseException | None = None
    error_tb: str = ""
    printed: str = ""
    done: bool = False
    # What the check yielded and raised, made into plain findings on the check's own thread:
    # str() of a pack's object (a summary whose __str__ loops) must not run on the main thread.
    normalized: list | None = None
    error_text: str = ""


def _run_one(job: _Job, stream: _ThreadRoutedStream, wake: threading.Condition) -> None:
    buf = io.StringIO()
    stream.buffers[threading.get_ident()] = buf
    findings: list = []
    try:
        result = job.info.func(job.ctx)
        if result is not None:
            for item in result:
                findings.append(item)
    except BaseException as exc:  # noqa: BLE001 - a check must not take the run down, even with SystemExit
        job.error = exc
        job.error_tb = traceback.format_exc()
    finally:
        stream.buffers.pop(threading.get_ident(), None)
        job.printed = buf.getvalue()
        job.findings = findings
        try:
            job.normalized = [_normalize(job.info, item) for item in findings]
            if job.error is not None and not isinstance(job.error, ProbeTimeout):
                job.error_text = _cut(f"{type(job.error).__name__}: {job.error}", MAX_SUMMARY)
        except BaseException as exc:  # noqa: BLE001 - a finding whose str() raises is the check's bug
            job.normalized = [Finding(Status.ERROR, _cut(f"check yielded a finding that cannot be shown: "
                                                         f"{type(exc).__name__}", MAX_SUMMARY), subject=job.info.id)]
            job.error_text = job.error_text or type(job.error).__name__
        with wake:
            job.done = True
            wake.notify_all()


def _close(job: _Job, debug: bool, interrupted: str = "", run_bound: float | None = None) -> CheckRun:
    """interrupted: the signal that ended the run; run_bound: the whole run's --timeout, when
    that (not the check's own) is what ran out."""
    info = job.info
    duration = time.monotonic() - job.started if job.started else 0.0
    if not job.done and interrupted:
        when = "before it finished" if job.started else "before it started"
        finding = Finding(Status.ERROR, f"{info.title}: the run was interrupted by {interrupted} {when}",
                          subject=info.id, fix=f"distdoctor check --only {info.id}")
        return CheckRun(info.id, info.title, info.tags, Status.ERROR, (finding,), duration, info.source)
    if not job.done:
        if not job.started:
            reason = f"did not start: the run's {run_bound:g} s bound (--timeout) ran out first"
        elif run_bound is not None and duration < job.timeout:
            reason = f"was still running when the run's {run_bound:g} s bound (--timeout) ran out, and was abandoned"
        else:
            reason = f"did not finish within its {job.timeout:g} s deadline and was abandoned"
        finding = Finding(Status.TIMEOUT, f"{info.title}: check {reason}", subject=info.id,
                          explanation="A check that hangs usually means a command it runs is hung "
                                      "(a GPU off the bus, an unresponsive file system or host).",
                          fix=f"distdoctor check --only {info.id} --timeout {max(job.timeout * 3, 30):g} --debug")
        return CheckRun(info.id, info.title, info.tags, Status.TIMEOUT, (finding,), duration, info.source)

    findings: list[Finding] = list(job.normalized or [])
    if isinstance(job.error, ProbeTimeout):
        finding = job.error.finding
        findings.append(Finding(finding.status, finding.summary, finding.subject or info.id, finding.explanation,
                                finding.fix, redact(dict(finding.evidence)), remedy=finding.remedy))
    elif job.error is not None:
        exc = job.error
        evidence = {"exception": type(exc).__name__}
        if debug:
            evidence["traceback"] = job.error_tb
        findings.append(Finding(Status.ERROR, f"check raised {job.error_text or type(exc).__name__}",
                                subject=info.id,
                                explanation="This is a bug in the check or an unexpected state of the machine.",
                                fix=f"distdoctor check --only {info.id} --debug", evidence=evidence))
    if job.printed:
        findings.append(Finding(Status.ERROR, f"check printed {len(job.printed)} characters to stdout",
                                subject=info.id, explanation="Checks must yield findings, not print; the text was "
                                                             "kept out of the report.",
                                evidence={"printed": job.printed[:2000]}))
    if not findings:
        findings.append(Finding(Status.OK, "no problems found"))
    status = worst(f.status for f in findings)
    return CheckRun(info.id, info.title, info.tags, status, tuple(findings), duration, info.source)


def _normalize(info: CheckInfo, item) -> Finding:
    """One yielded item as a plain Finding (on the check's thread; see _Job.normalized): ERROR
    for what is not a Finding or has a status that is not a Status, strings made str."""
    if not isinstance(item, Finding):
        return Finding(Status.ERROR, _cut(f"check yielded {type(item).__name__} {item!r:.80}, not a Finding",
                                          MAX_SUMMARY), subject=info.id,
                       fix="# the check must yield ok(...), warn(...), fail(...) or skip(...) findings")
    if not isinstance(item.status, Status):
        return Finding(Status.ERROR, _cut(f"check yielded a finding whose status is {type(item.status).__name__} "
                                          f"{item.status!r:.40}, not a Status", MAX_SUMMARY), subject=info.id,
                       fix="# yield ok(...), warn(...), fail(...) or skip(...), which set the status")
    status = Status.WARN if item.status in (Status.ERROR, Status.TIMEOUT) else item.status
    evidence = item.evidence if isinstance(item.evidence, Mapping) else {"evidence": repr(item.evidence)[:200]}
    return Finding(status, _cut(str(item.summary), MAX_SUMMARY), _cut(str(item.subject), MAX_SUMMARY),
                   str(item.explanation), str(item.fix), _cut_strings(json_safe(redact(dict(evidence)))),
                   item.action if isinstance(item.action, str) and is_action(item.action) else "",
                   remedy=item.remedy)


# A summary is one line for a console; evidence strings are what was judged. Both are cut so a
# 100 KB environment variable (or a check that quotes one) cannot make a report of megabytes.
MAX_SUMMARY = 500
MAX_EVIDENCE_TEXT = 4096


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit - 40]}... ({len(text)} characters in all)"


def _cut_strings(value):
    if isinstance(value, str):
        return _cut(value, MAX_EVIDENCE_TEXT)
    if isinstance(value, dict):
        return {k: _cut_strings(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_cut_strings(v) for v in value]
    return value


def run_checks(checks: Iterable[CheckInfo], make_context: Callable[[CheckInfo], Context], *,
               timeout_for: Callable[[CheckInfo], float] = lambda c: c.timeout,
               jobs: int = 8, total_timeout: float = 60.0, debug: bool = False,
               on_progress: Callable[[int, int], None] | None = None,
               run_bound: float | None = None) -> list[CheckRun]:
    """run_bound: the run's --timeout, which total_timeout is what is left of, to name it
    when it runs out (total_timeout itself when not given)."""
    jobs_list = [_Job(info, make_context(info), timeout_for(info)) for info in checks]
    total = len(jobs_list)
    run_deadline = time.monotonic() + total_timeout
    wake = threading.Condition()
    stream = _ThreadRoutedStream(sys.stdout)
    results: dict[int, CheckRun] = {}
    real_stdout = sys.stdout
    sys.stdout = stream
    try:
        _drive(jobs_list, results, stream, wake, jobs, run_deadline, debug, on_progress,
               total_timeout if run_bound is None else run_bound)
    except Interrupted as exc:
        for index in range(total):
            if index not in results:
                results[index] = _close(jobs_list[index], debug, exc.signal_name)
        exc.runs = [results[i] for i in range(total)]
        raise
    finally:
        # An abandoned check may still print later: keep routing its thread's output away
        # from the real stdout for the rest of the process.
        if all(job.done for job in jobs_list):
            sys.stdout = real_stdout
    return [results[i] for i in range(total)]


def _drive(jobs_list: list[_Job], results: dict[int, CheckRun], stream: _ThreadRoutedStream,
           wake: threading.Condition, jobs: int, run_deadline: float, debug: bool,
           on_progress: Callable[[int, int], None] | None, run_bound: float) -> None:
    """Start jobs up to `jobs` at a time and close each as it finishes or expires, filling
    results in place (so an Interrupted raised here leaves what finished in results)."""
    total = len(jobs_list)
    pending = list(range(total))
    active: list[int] = []
    while pending or active:
        now = time.monotonic()
        while pending and len(active) < max(1, jobs) and now < run_deadline:
            index = pending.pop(0)
            job = jobs_list[index]
            job.started = time.monotonic()
            job.thread = threading.Thread(target=_run_one, args=(job, stream, wake), daemon=True,
                                          name=f"check-{job.info.id}")
            job.thread.start()
            active.append(index)
        if now >= run_deadline:
            for index in pending + active:
                results[index] = _close(jobs_list[index], debug, run_bound=run_bound)
            return
        with wake:
            finished = [i for i in active if jobs_list[i].done]
            if not finished:
                next_deadline = min([jobs_list[i].started + jobs_list[i].timeout for i in active] + [run_deadline])
                wake.wait(max(0.0, min(next_deadline - time.monotonic(), 0.5)))
                finished = [i for i in active if jobs_list[i].done]
        now = time.monotonic()
        expired = [i for i in active if not jobs_list[i].done and now >= jobs_list[i].started + jobs_list[i].timeout]
        for index in finished + expired:
            active.remove(index)
            results[index] = _close(jobs_list[index], debug)
        if on_progress and (finished or expired):
            on_progress(len(results), total)


def build_report(runs: list[CheckRun], *, host: str, context: RunContext, started: float,
                 duration: float, command: str = "check") -> Report:
    started_at = datetime.fromtimestamp(started, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return Report(__version__, host, context, started_at, duration, tuple(runs), command)


def problem_run(check_id: str, title: str, status: Status, messages: list[str], fix: str = "") -> CheckRun:
    """A CheckRun for trouble found outside any check: broken packs, config problems."""
    findings = tuple(Finding(status, m, fix=fix) for m in messages)
    return CheckRun(check_id, title, ("core",), status, findings, 0.0, "distdoctor")
