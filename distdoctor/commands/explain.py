"""`distdoctor explain ID`: one check's title, tags, parameters and description."""

from __future__ import annotations

import argparse

from distdoctor import config as config_mod
from distdoctor import output
from distdoctor import registry as registry_mod
from distdoctor.commands.common import UsageError, tool_cache
from distdoctor.model import EXIT_OK



def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id")
    parser.add_argument("--checks-dir", action="append", default=[], metavar="DIR")


def run(args: argparse.Namespace, out: output.ReservedStdout) -> int:
    from distdoctor.host import Host

    host = Host()
    registry = registry_mod.load(args.checks_dir, host.env, cache=tool_cache(host))
    info = registry.checks.get(args.id)
    if info is None:
        close = [c for c in registry.checks if args.id in c]
        hint = f" (did you mean {', '.join(close[:5])}?)" if close else ""
        raise UsageError(f"no check named {args.id!r}{hint}")
    stream = out.text()
    print(f"{info.id}: {info.title}", file=stream)
    print(f"tags: {', '.join(info.tags) or '-'}   timeout: {info.timeout:g} s   source: {info.source}", file=stream)
    if info.params:
        print("parameters (set them under [checks.\"%s\"] in the config file):" % info.id, file=stream)
        for key, value in info.params.items():
            print(f"  {key} = {config_mod.toml_value(value)}", file=stream)
    if info.description:
        print(file=stream)
        print(info.description, file=stream)
    stream.flush()
    return EXIT_OK
