"""What `distdoctor log` finds in a set of files: read them, scan, diagnose, read pasted tool
output; the check runs of one invocation (commands/log.py renders them)."""

from __future__ import annotations

import time

from distdoctor.model import CheckRun, Finding, Status, worst
from distdoctor.text import plural


def _run(check_id: str, title: str, findings: list[Finding], duration: float = 0.0, source: str = "log") -> CheckRun:
    return CheckRun(check_id, title, ("log",), worst(f.status for f in findings), tuple(findings), duration, source)


def analyse(paths: list[str], *, stdin=None, matcher=None, max_files: int | None = None,
            max_bytes: int | None = None, hang_gap: float = 60.0, block: int | None = None,
            use_grep: bool = True, refs_from: int | None = -1,
            searches: int | None = None) -> tuple[list[CheckRun], bool]:
    """The check runs of one `log` invocation, and whether anything could be read at all.
    refs_from: plain files from this size on are searched from the page cache, by `searches`
    greps at once (-1: reader.REFS_FROM; None: never, every block read and searched in one
    stream); searches None: one per CPU."""
    from distdoctor.logs import diagnose, nccl_setup, pasted, reader
    from distdoctor.logs.scan import Scanner

    if matcher is None:
        from distdoctor.logs import signatures

        matcher = signatures.matcher()
    started = time.monotonic()
    files, problems = reader.expand(paths, max_files if max_files is not None else reader.MAX_FILES)
    stats = reader.Stats()
    pastes = pasted.Collector()
    scanner = Scanner(matcher, use_grep=use_grep, on_text=pastes.add, searches=searches)
    # the scanner counts the lines of large inputs (grep does, for free): the reader need not
    scanner.feed(reader.blocks(files, stats, stdin=stdin, block=block or reader.BLOCK,
                               max_bytes=max_bytes if max_bytes is not None else reader.MAX_BYTES, count=False,
                               refs_from=reader.REFS_FROM if refs_from == -1 else refs_from))
    scan = scanner.resolve()
    stats.lines += scan.lines
    read_s = time.monotonic() - started
    problems += stats.problems
    input_findings = [Finding(p.status, p.message, subject=p.path) for p in problems]
    input_findings += [Finding(Status.WARN, note) for note in scan.notes]
    long_lines = stats.truncated_lines + scan.long_lines
    if long_lines:
        input_findings.append(Finding(Status.WARN, f"{long_lines} line(s) longer than 64 KiB: read truncated"))
    if sum(scan.dropped.values()):
        input_findings.append(Finding(Status.WARN, f"{sum(scan.dropped.values())} matching lines past the first "
                                                   f"{len(scan.events)} were counted, not kept"))
    input_findings.append(Finding(Status.OK if stats.files else Status.SKIP,
                                  f"read {plural(stats.lines, 'line')} ({stats.bytes / 2**20:.1f} MiB) from "
                                  f"{plural(stats.files, 'file')} in {read_s:.1f} s",
                                  evidence={"files": stats.files, "bytes": stats.bytes, "lines": stats.lines}))
    runs = [_run("log.input", "The input could be read", input_findings, read_s)]
    if stats.files:
        runs.append(_guarded("log.diagnosis", "What failed first, on which rank and host",
                             lambda: diagnose.diagnose(scan, hang_gap, nccl_setup.address_book(scan))))
        runs.append(_guarded("log.nccl-setup", "NCCL's setup agrees across ranks", lambda: nccl_setup.judge(scan)))
        try:
            runs.extend(pastes.runs())
        except Exception as exc:  # noqa: BLE001 -- as the engine does for a check: a bug is an ERROR, not a traceback
            runs.append(_error_run("log.pasted-output", "Tool output pasted into the log", exc))
    return runs, bool(stats.files)


def _error_run(check_id: str, title: str, exc: Exception) -> CheckRun:
    finding = Finding(Status.ERROR, f"{check_id} failed: {type(exc).__name__}: {exc}",
                      fix="# please report this with the log (or the lines around the failure) to distdoctor")
    return CheckRun(check_id, title, ("log",), Status.ERROR, (finding,), 0.0, "log")


def _guarded(check_id: str, title: str, judge) -> CheckRun:
    try:
        return _run(check_id, title, judge())
    except Exception as exc:  # noqa: BLE001 -- as the engine does for a check: a bug is an ERROR, not a traceback
        return _error_run(check_id, title, exc)


