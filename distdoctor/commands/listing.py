"""`distdoctor list`: the checks that would run, from every pack."""

from __future__ import annotations

import argparse
import json
import sys

from distdoctor import output
from distdoctor import registry as registry_mod
from distdoctor.commands.common import tool_cache
from distdoctor.model import EXIT_ERROR, EXIT_OK



def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--checks-dir", action="append", default=[], metavar="DIR")


def run(args: argparse.Namespace, out: output.ReservedStdout) -> int:
    from distdoctor.host import Host

    host = Host()
    registry = registry_mod.load(args.checks_dir, host.env, cache=tool_cache(host))
    checks = registry.sorted()
    stream = out.text()
    if args.json:
        from distdoctor.render.json import json_safe

        print(json.dumps(json_safe([{"id": c.id, "title": c.title, "area": c.area, "tags": list(c.tags),
                                     "timeout_s": c.timeout, "params": dict(c.params), "source": c.source}
                                    for c in checks]), indent=2, allow_nan=False), file=stream)
    else:
        width = max((len(c.id) for c in checks), default=10)
        for c in checks:
            print(f"{c.id:<{width}}  {c.title}", file=stream)
    stream.flush()
    for _source, message in registry.problems:
        print(f"distdoctor: {message}", file=sys.stderr)
    return EXIT_ERROR if registry.problems else EXIT_OK
