"""`distdoctor inventory`: this node's named facts, or an [expect] table of them (--snapshot)."""

from __future__ import annotations

import argparse
import json

from distdoctor import limits, output
from distdoctor.commands.common import add_output_arguments, load_config, write_output
from distdoctor.model import EXIT_OK



def add_arguments(inv: argparse.ArgumentParser) -> None:
    add_output_arguments(inv, ("text", "json"), what="it")
    inv.add_argument("--snapshot", action="store_true",
                     help="print an [expect] table of the facts that should agree across nodes, for the config file")
    inv.add_argument("--config", action="append", default=[], metavar="FILE", help="extra config file (TOML)")
    inv.add_argument("--timeout", type=limits.arg_seconds, default=None,
                     help="bound for the whole inventory, seconds (default 20)")


def run(args: argparse.Namespace, out: output.ReservedStdout) -> int:
    from distdoctor import inventory as inventory_mod
    from distdoctor.facts import Facts
    from distdoctor.host import Host
    from distdoctor.render.json import json_safe

    host = Host()
    config = load_config(args.config, host)
    timeout = args.timeout if args.timeout is not None else inventory_mod.COLLECT_TIMEOUT
    inventory = inventory_mod.collect(Facts(host, config), timeout=timeout)
    if args.snapshot:
        text = inventory_mod.snapshot_toml(inventory, host.hostname())
    elif args.format == "json":
        text = json.dumps(json_safe(inventory), indent=2, allow_nan=False) + "\n"
    else:
        text = "".join(f"{name} = {inventory_mod.text_value(value)}\n" for name, value in inventory.items())
    write_output(text, args.output, out.fd)
    return EXIT_OK
