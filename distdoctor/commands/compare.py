"""`distdoctor compare REPORT.json|DIR...`: saved node reports side by side, the odd nodes and their fix."""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from collections import Counter

from distdoctor import output
from distdoctor.commands.common import UsageError, add_cluster_output, cluster_context, expectations, load_config, write_cluster
from distdoctor.model import EXIT_CODES_HELP

EPILOG = EXIT_CODES_HELP


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("reports", nargs="+", metavar="REPORT.json|DIR",
                        help="reports from `check --format json -o FILE` or a `fleet --save` directory")
    add_cluster_output(parser)


def run(args: argparse.Namespace, out: output.ReservedStdout) -> int:
    from distdoctor.crosscheck import nodes
    from distdoctor.host import Host

    started_wall, started = time.time(), time.monotonic()
    host = Host()
    config = load_config(args.config, host)
    expect = expectations(args, config)
    paths: list[str] = []
    for path in args.reports:
        names = host.list_dir(path) if os.path.isdir(path) else None
        if names is not None:
            listed = [os.path.join(path, n) for n in names if n.endswith(".json")]
            # A FIFO (or a device, a socket) named *.json in a directory would block the read
            # for ever: only regular files are reports; the rest is said, not read.
            for skipped in [p for p in listed if not os.path.isfile(p)]:
                print(f"distdoctor: {skipped}: not a regular file, skipped", file=sys.stderr)
            paths += [p for p in listed if os.path.isfile(p)]
        else:
            paths.append(path)
    errors: list[str] = []
    docs: list[tuple[str, dict]] = []
    # Parsing thousands of reports makes millions of objects and no garbage: the cyclic
    # collector would walk them again and again (10,000 reports: 4x slower with it on).
    gc.disable()
    try:
        for path in paths:
            if os.path.exists(path) and not os.path.isfile(path):
                errors.append(f"{path}: not a regular file (a FIFO or a device is never read as a report)")
                continue
            try:
                text = host.read_text(path, max_bytes=64 * 1024 * 1024)
            except OSError as exc:
                errors.append(f"{path}: cannot read: {exc.strerror or exc}")
                continue
            if text is None:
                errors.append(f"{path}: no such file")
                continue
            try:
                docs.append((path, nodes.slim(nodes.parse_report(text))))
            except nodes.NotAReport as exc:
                errors.append(f"{path}: {exc}")
    finally:
        gc.enable()
    if errors or not docs:
        raise UsageError("\n".join(errors) if errors else "no report files (*.json) given")
    # Nodes are named by the host in their report; two files from one host (or two nodes that
    # share a hostname, which is itself a finding) keep their file names apart.
    hosts = [str(doc.get("host") or os.path.basename(path)) for path, doc in docs]
    seen = Counter(hosts)
    reports = {}
    by_file = []
    for (path, doc), name in zip(docs, hosts):
        reports[name if seen[name] == 1 else path] = doc
        if seen[name] > 1:
            by_file.append(path)
    from distdoctor.engine import build_report

    stamp = build_report([], host=host.hostname(), context=cluster_context(len(reports)), started=started_wall,
                         duration=0.0)
    view = nodes.build(reports, expect=expect, command="compare", host=host.hostname(),
                         started_at=stamp.started_at, duration=time.monotonic() - started,
                         context=stamp.context, by_file=by_file)
    return write_cluster(view, args, out, config.run.get("fail_on", "fail"))
