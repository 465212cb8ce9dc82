"""The command table: each subcommand is a module here with HELP, add_arguments(parser) and
run(args, out) -> int, imported only when its command runs (or `--help` lists it)."""

from __future__ import annotations

import importlib
from types import ModuleType

# name -> (module, one-line help). The help is here so that listing the commands imports none.
COMMANDS: dict[str, tuple[str, str]] = {
    "check": ("check", "run the checks on this node"),
    "list": ("listing", "list the available checks"),
    "explain": ("explain", "describe one check"),
    "health": ("health", "run the checks as Slurm's HealthCheckProgram/Prolog/Epilog: drain this node on failure"),
    "inventory": ("inventory", "print this node's inventory of named facts"),
    "compare": ("compare", "compare saved node reports: the odd nodes and their fix"),
    "fleet": ("fleet", "run check on every node (srun or ssh) and name the odd ones"),
    "nccl-test": ("nccl_test", "all_reduce smoke test across every rank of a job"),
    "log": ("log", "read a failed job's logs: the rank that failed first, its host, the cause, the fix"),
    "hang": ("hang", "a running job is stuck: which rank, on which host, doing what (py-spy, /proc, Flight Recorder)"),
}


def load(name: str) -> ModuleType:
    return importlib.import_module(f"distdoctor.commands.{COMMANDS[name][0]}")
