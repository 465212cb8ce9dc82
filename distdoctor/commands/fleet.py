"""`distdoctor fleet`: run check on every node (through srun or ssh) and name the odd ones."""

from __future__ import annotations

import argparse

from distdoctor import limits, output
from distdoctor.commands.common import UsageError, add_cluster_output, expectations, load_config, write_cluster
from distdoctor.model import EXIT_CODES_HELP

EPILOG = EXIT_CODES_HELP


def add_arguments(parser: argparse.ArgumentParser) -> None:
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--nodes", metavar="NODELIST", help="Slurm nodes to check (starts its own step)")
    where.add_argument("--hosts", action="append", default=[], metavar="HOSTS",
                       help="hosts to check over ssh (names or hostlist expressions, comma-separated)")
    parser.add_argument("--timeout", type=limits.arg_seconds, default=30.0,
                        help="seconds a node has to answer (default 30); later nodes are named, not waited for")
    parser.add_argument("--fanout", type=limits.arg_count(limits.MAX_JOBS), default=64,
                        help="ssh connections at once (default 64)")
    parser.add_argument("--ssh-option", action="append", default=[], metavar="OPT",
                        help="extra ssh option, e.g. -F ~/.ssh/cluster_config (repeatable)")
    parser.add_argument("--distdoctor", metavar="COMMAND", default=None,
                        help="how to run distdoctor on the nodes (default: this interpreter's `-m distdoctor` "
                             "under srun, `python3 -m distdoctor` over ssh)")
    parser.add_argument("--only", action="append", default=[], metavar="ID|TAG", help="passed to each node's check")
    parser.add_argument("--skip", action="append", default=[], metavar="ID|TAG", help="passed to each node's check")
    parser.add_argument("--save", metavar="DIR", help="write each node's report to DIR/<node>.json")
    add_cluster_output(parser)


def run(args: argparse.Namespace, out: output.ReservedStdout) -> int:
    from distdoctor import hostlist
    from distdoctor.crosscheck import fleet
    from distdoctor.host import Host

    host = Host()
    config = load_config(args.config, host)
    expect = expectations(args, config)
    try:
        view = fleet.run(args, host, expect)
    except (ValueError, hostlist.HostlistError) as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"cannot save the reports: {exc.strerror or exc}") from None
    return write_cluster(view, args, out, config.run.get("fail_on", "fail"))
