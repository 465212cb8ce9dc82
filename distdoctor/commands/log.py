"""`distdoctor log PATH... | -`: read a failed job's logs and pasted tool output; the rank that
failed first, its host, the cause and the fix (the reading is distdoctor/logs/analysis.py)."""

from __future__ import annotations

import argparse
import shlex
import sys
import threading
import time

from distdoctor import limits, output
from distdoctor.commands.common import UsageError, add_output_arguments, render, write_output
from distdoctor.model import EXIT_CODES_HELP, EXIT_ERROR, CheckRun, Finding, Status, exit_code

EPILOG = EXIT_CODES_HELP
# Reading 4 GiB of logs takes minutes; a bound is what keeps a FIFO that never ends, a file that
# keeps growing or a bug from holding whoever runs `log` for ever.
DEFAULT_TIMEOUT = 600.0
OWN_SIGNALS = True  # runs no third-party code; Ctrl-C ends it as Python does

DESCRIPTION = """\
Read what a failed job left behind (Slurm output, torchrun log folders, mpirun --tag-output
transcripts, NCCL_DEBUG=INFO logs, an issue with pasted tool output) and name the rank that
failed first, its host, the cause and the fix. PATH may be a file, a directory (read
recursively), a .gz/.bz2/.xz file, or - for stdin."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from distdoctor.logs import reader

    parser.add_argument("paths", nargs="+", metavar="PATH", help="log files, directories, or - for stdin")
    add_output_arguments(parser)
    parser.add_argument("-v", "--verbose", action="store_true", help="show OK findings and explanations")
    parser.add_argument("--fail-on", choices=("warn", "fail"), default="fail",
                        help="lowest status that makes the exit code non-zero (default: fail)")
    parser.add_argument("--max-files", type=limits.arg_count(1_000_000), default=reader.MAX_FILES, metavar="N",
                        help=f"read at most N files from each directory (default {reader.MAX_FILES})")
    parser.add_argument("--max-bytes", type=_size, default=reader.MAX_BYTES, metavar="SIZE",
                        help="read at most SIZE of one file: its head and tail, half each (default 4G)")
    parser.add_argument("--timeout", type=limits.arg_seconds, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                        help=f"bound for reading and judging the logs (default {DEFAULT_TIMEOUT:g}); past it the "
                             f"report says what was not finished, exit 2")
    parser.add_argument("--hang-gap", type=limits.arg_seconds, default=60.0, metavar="SECONDS",
                        help="a rank silent this long before the others' last line counts as stopped (default 60)")


def _size(text: str) -> int:
    units = {"k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
    t = text.strip().lower().rstrip("ib")
    try:
        value = int(float(t[:-1]) * units[t[-1]]) if t and t[-1] in units else int(t)
    except (ValueError, IndexError, OverflowError):  # OverflowError: `infG`
        raise argparse.ArgumentTypeError(f"not a size: {text[:40]!r} (examples: 512M, 4G)") from None
    if value < 1024:
        raise argparse.ArgumentTypeError("--max-bytes must be at least 1K")
    return value


def run(args: argparse.Namespace, out=None) -> int:
    from distdoctor.logs.analysis import analyse
    from distdoctor.engine import build_report
    from distdoctor.launch import detect_context

    started_wall = time.time()
    started = time.monotonic()
    if args.paths.count("-") > 1:
        raise UsageError("stdin (-) can be read only once")
    if args.output:
        output.check_writable(args.output)  # before reading gigabytes: exit 74 now, not after
    elif sys.stdout is None:
        raise output.OutputError("cannot write the report to stdout: it is closed")
    box: dict = {}
    done = threading.Event()

    def work() -> None:
        try:
            box["result"] = analyse(args.paths, stdin=sys.stdin.buffer if sys.stdin is not None else None,
                                    max_files=args.max_files, max_bytes=args.max_bytes, hang_gap=args.hang_gap)
        except Exception as exc:  # noqa: BLE001 -- a bug while reading: said in one line, never a traceback
            box["error"] = exc
        finally:
            done.set()

    # On a daemon thread: the main thread keeps the bound and takes Ctrl-C at once; at the bound
    # the thread is abandoned and the CLI exits without waiting for it.
    worker = threading.Thread(target=work, daemon=True, name="log-analysis")
    worker.start()
    # An Event, not join(): Python 3.11's join() interrupted by Ctrl-C marks the thread dead while
    # it still runs, and the exit that follows then waits on it (and on stdin's lock) for ever.
    done.wait(args.timeout)
    if "error" in box:
        exc = box["error"]
        print(f"distdoctor: reading the log failed: {type(exc).__name__}: {exc} (please report this)", file=sys.stderr)
        return EXIT_ERROR
    if "result" in box:
        runs, readable = box["result"]
    else:
        runs, readable = [CheckRun("log.input", "The input could be read", ("log",), Status.TIMEOUT, (Finding(
            Status.TIMEOUT, f"reading and judging the logs did not finish within --timeout {args.timeout:g} s",
            fix=f"distdoctor log --timeout {max(args.timeout * 4, 60):g} --max-bytes 512M {shlex.join(args.paths)}"),),
            args.timeout, "log")], True
    from distdoctor.host import Host

    report = build_report(runs, host=Host().hostname(), context=detect_context({}), started=started_wall,
                          duration=time.monotonic() - started, command="log")
    text = render(report, args.format, args.verbose, bool(args.output))
    try:
        if text:
            write_output(text, args.output)
        elif args.output:
            write_output(render(report, "console", args.verbose, True), args.output)
    except OSError as exc:
        raise output.OutputError(f"cannot write the report to {args.output or 'stdout'}: "
                                 f"{exc.strerror or exc}") from None
    if not readable:
        return EXIT_ERROR
    return exit_code(report.runs, args.fail_on)
