"""`distdoctor log PATH... | -`: read a failed job's logs and pasted tool output; the rank that
failed first, its host, the cause and the fix (the reading is distdoctor/logs/analysis.py)."""

from __future__ import annotations

import argparse
import sys
import time

from distdoctor import limits
from distdoctor.commands.common import UsageError, add_output_arguments, render, write_output
from distdoctor.model import EXIT_CODES_HELP, EXIT_ERROR, exit_code

EPILOG = EXIT_CODES_HELP
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


def run(args: argparse.Namespace, out=None) -> int:
    from distdoctor.logs.analysis import analyse
    from distdoctor.engine import build_report
    from distdoctor.launch import detect_context

    started_wall = time.time()
    started = time.monotonic()
    if args.paths.count("-") > 1:
        raise UsageError("stdin (-) can be read only once")
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
    text = render(report, args.format, args.verbose, bool(args.output))
    try:
        if text:
            write_output(text, args.output)
        elif args.output:
            write_output(render(report, "console", args.verbose, True), args.output)
    except OSError as exc:
        print(f"distdoctor: cannot write the report to {args.output}: {exc.strerror or exc}", file=sys.stderr)
        from distdoctor.model import EXIT_OUTPUT

        return EXIT_OUTPUT
    if not readable:
        return EXIT_ERROR
    return exit_code(report.runs, args.fail_on)
