"""`distdoctor log PATH... | -`: read, diagnose, report. The CLI only parses arguments and
calls run(); everything here builds the same Report that `check` renders."""

from __future__ import annotations

import argparse
import sys
import time

from distdoctor import limits
from distdoctor.model import EXIT_ERROR, CheckRun, Finding, Status, exit_code, worst
from distdoctor.grammar import plural

DESCRIPTION = """\
Read what a failed job left behind (Slurm output, torchrun log folders, mpirun --tag-output
transcripts, NCCL_DEBUG=INFO logs, an issue with pasted tool output) and name the rank that
failed first, its host, the cause and the fix. PATH may be a file, a directory (read
recursively), a .gz/.bz2/.xz file, or - for stdin."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from distdoctor.logs import reader

    parser.add_argument("paths", nargs="+", metavar="PATH", help="log files, directories, or - for stdin")
    parser.add_argument("--format", choices=("console", "json", "prometheus"), default="console")
    parser.add_argument("--json", action="store_const", const="json", dest="format", help="same as --format json")
    parser.add_argument("-o", "--output", metavar="FILE", help="write the report here (atomically) instead of stdout")
    parser.add_argument("-v", "--verbose", action="store_true", help="show OK findings and explanations")
    parser.add_argument("--fail-on", choices=("warn", "fail"), default="fail",
                        help="lowest status that makes the exit code non-zero (default: fail)")
    parser.add_argument("--max-files", type=limits.arg_count(1_000_000), default=reader.MAX_FILES, metavar="N",
                        help=f"read at most N files from each directory (default {reader.MAX_FILES})")
    parser.add_argument("--max-bytes", type=_size, default=reader.MAX_BYTES, metavar="SIZE",
                        help="read at most SIZE of one file: its head and tail, half each (default 4G)")
    parser.add_argument("--hang-gap", type=limits.arg_seconds, default=60.0, metavar="SECONDS",
                        help="a rank silent this long before the others' last line counts as stopped (default 60)")


def _size(text: str) -> int:
    units = {"k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
    t = text.strip().lower().rstrip("ib")
    try:
        value = int(float(t[:-1]) * units[t[-1]]) if t and t[-1] in units else int(t)
    except (ValueError, IndexError):
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (examples: 512M, 4G)") from None
    if value < 1024:
        raise argparse.ArgumentTypeError("--max-bytes must be at least 1K")
    return value


def _run(check_id: str, title: str, findings: list[Finding], duration: float = 0.0, source: str = "log") -> CheckRun:
    return CheckRun(check_id, title, ("log",), worst(f.status for f in findings), tuple(findings), duration, source)


def analyse(paths: list[str], *, stdin=None, matcher=None, max_files: int | None = None,
            max_bytes: int | None = None, hang_gap: float = 60.0, block: int | None = None,
            use_grep: bool = True) -> tuple[list[CheckRun], bool]:
    """The check runs of one `log` invocation, and whether anything could be read at all."""
    from distdoctor.logs import diagnose, infofacts, pasted, reader
    from distdoctor.logs.scan import Scanner

    if matcher is None:
        from distdoctor.logs import signatures

        matcher = signatures.matcher()
    started = time.monotonic()
    files, problems = reader.expand(paths, max_files if max_files is not None else reader.MAX_FILES)
    stats = reader.Stats()
    pastes = pasted.Collector()
    scanner = Scanner(matcher, use_grep=use_grep, on_text=pastes.add)
    scanner.feed(reader.blocks(files, stats, stdin=stdin, block=block or reader.BLOCK,
                               max_bytes=max_bytes if max_bytes is not None else reader.MAX_BYTES))
    scan = scanner.resolve()
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
                             lambda: diagnose.diagnose(scan, hang_gap, infofacts.address_book(scan))))
        runs.append(_guarded("log.nccl-setup", "NCCL's setup agrees across ranks", lambda: infofacts.judge(scan)))
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


def run(args: argparse.Namespace) -> int:
    from distdoctor import cli
    from distdoctor.engine import build_report
    from distdoctor.launch import detect_context

    started_wall = time.time()
    started = time.monotonic()
    if args.paths.count("-") > 1:
        raise cli.UsageError("stdin (-) can be read only once")
    try:
        runs, readable = analyse(args.paths, stdin=sys.stdin.buffer, max_files=args.max_files,
                                 max_bytes=args.max_bytes, hang_gap=args.hang_gap)
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # noqa: BLE001 -- a bug while reading: say so in one line, never a traceback
        print(f"distdoctor: reading the log failed: {type(exc).__name__}: {exc} (please report this)", file=sys.stderr)
        return EXIT_ERROR
    from distdoctor.host import Host

    report = build_report(runs, host=Host().hostname(), context=detect_context({}), started=started_wall,
                          duration=time.monotonic() - started, command="log")
    text = cli.render(report, args.format, args.verbose, bool(args.output))
    try:
        if text:
            cli.write_output(text, args.output)
        elif args.output:
            cli.write_output(cli.render(report, "console", args.verbose, True), args.output)
    except OSError as exc:
        print(f"distdoctor: cannot write the report to {args.output}: {exc.strerror or exc}", file=sys.stderr)
        from distdoctor.model import EXIT_OUTPUT

        return EXIT_OUTPUT
    if not readable:
        return EXIT_ERROR
    return exit_code(report.runs, args.fail_on)
