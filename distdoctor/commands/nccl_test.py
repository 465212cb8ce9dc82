"""`distdoctor nccl-test`: a tiny all_reduce across every rank of a job that never hangs (the
test itself is distdoctor/nccltest/)."""

from __future__ import annotations

import argparse

# Runs no third-party code and manages its own output and signals; it ends with os._exit while
# its daemon threads may sit in torch's C++ store calls (see cli._finish).
OWN_SIGNALS = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from distdoctor import nccltest

    nccltest.add_arguments(parser)


def run(args: argparse.Namespace, out=None) -> int:
    from distdoctor import nccltest

    return nccltest.run(args)
