"""`distdoctor hang`: a running job is stuck; which rank, on which host, doing what (the work
is in distdoctor/hang/)."""

from __future__ import annotations

import argparse
import json
import sys
import time

from distdoctor import limits, output
from distdoctor.commands.common import UsageError, add_output_arguments, render, write_output
from distdoctor.model import EXIT_CODES_HELP, exit_code

EPILOG = EXIT_CODES_HELP
DESCRIPTION = """\
Name the stuck ranks of a running job: their host, pid, GPU and Python frame, and where the
others wait. Reads /proc and each rank's stack with py-spy (non-blocking); never stops,
signals or slows the job beyond a stack dump. See docs/hang.md."""


def _pids(text: str) -> list[int]:
    try:
        pids = [int(p) for p in text.replace(" ", ",").split(",") if p.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--pids {text!r}: write process ids, comma-separated") from None
    if not pids or any(p <= 0 for p in pids):
        raise argparse.ArgumentTypeError(f"--pids {text!r}: write positive process ids, comma-separated")
    return pids


def add_arguments(parser: argparse.ArgumentParser) -> None:
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--pids", type=_pids, metavar="PID,...", help="these processes (default: every rank on this node)")
    where.add_argument("--job", metavar="ID", help="every node of this running Slurm job (through srun --jobid ID --overlap)")
    where.add_argument("--hosts", action="append", default=[], metavar="HOSTS",
                       help="every rank on these hosts, over ssh (names or hostlist expressions, comma-separated)")
    parser.add_argument("--fanout", type=limits.arg_count(limits.MAX_JOBS), default=64,
                        help="ssh connections at once with --hosts (default 64)")
    parser.add_argument("--ssh-option", action="append", default=[], metavar="OPT",
                        help="extra ssh option with --hosts, e.g. -F ~/.ssh/cluster_config (repeatable)")
    parser.add_argument("--distdoctor", metavar="COMMAND", default="python3 -m distdoctor",
                        help="how to run distdoctor on the hosts (default: python3 -m distdoctor)")
    parser.add_argument("--native", action="store_true",
                        help="C/C++ frames too (py-spy --native: pauses each rank for the length of its dump)")
    parser.add_argument("--timeout", type=limits.arg_seconds, default=10.0,
                        help="bound for the whole command, seconds (default 10)")
    parser.add_argument("--node-snapshot", action="store_true", help=argparse.SUPPRESS)
    add_output_arguments(parser)
    parser.add_argument("-v", "--verbose", action="store_true", help="show OK findings")
    parser.add_argument("--fail-on", choices=("warn", "fail"), default="fail",
                        help="lowest status that makes the exit code non-zero (default: fail)")


def run(args: argparse.Namespace, out: output.ReservedStdout) -> int:
    from distdoctor.engine import build_report
    from distdoctor.hang import collect, verdict
    from distdoctor.host import Host
    from distdoctor.launch import detect_context

    started_wall, started = time.time(), time.monotonic()
    host = Host()
    if args.timeout < 2:
        raise UsageError("--timeout must be at least 2 s: reading a rank takes up to a second")
    if args.node_snapshot:
        # One node's part of --job: its snapshot as one JSON line, in one write (srun --label).
        doc = collect.snapshot(host, pids=args.pids, job=args.job, native=args.native, budget=args.timeout - 1,
                               node_name=host.env.get("SLURMD_NODENAME"))
        write_output(json.dumps(doc, separators=(",", ":")) + "\n", None, out.fd)
        return 0
    missing: list[tuple[str, str, str]] = []
    if args.hosts:
        import shlex

        from distdoctor import hostlist
        from distdoctor.hang import gather

        try:
            names = [h for value in args.hosts for part in value.split(",") if part.strip()
                     for h in hostlist.expand(part.strip())]
        except hostlist.HostlistError as exc:
            raise UsageError(f"--hosts: {exc}") from None
        if not names:
            raise UsageError("--hosts names no host")
        snapshots, missing = gather.hosts(host, names, args.timeout, shlex.split(args.distdoctor), native=args.native,
                                          fanout=args.fanout, ssh_options=args.ssh_option)
    elif args.job:
        from distdoctor.hang import gather

        snapshots, missing = gather.job(host, args.job, args.timeout, native=args.native)
    else:
        snapshots = [collect.snapshot(host, pids=args.pids, native=args.native, budget=args.timeout - 1)]
    runs = verdict.runs(snapshots, host.hostname(), job_mode=bool(args.job), missing=missing)
    report = build_report(runs, host=host.hostname(), context=detect_context(host.env), started=started_wall,
                          duration=time.monotonic() - started, command="hang")
    text = render(report, args.format, args.verbose, bool(args.output), stream=None if args.output else out.text())
    try:
        if text:
            write_output(text, args.output, out.fd)
    except OSError as exc:
        print(f"distdoctor: cannot write the report to {args.output}: {exc.strerror or exc}", file=sys.stderr)
        from distdoctor.model import EXIT_OUTPUT

        return EXIT_OUTPUT
    return exit_code(report.runs, args.fail_on)
