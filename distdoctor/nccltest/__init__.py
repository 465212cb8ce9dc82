"""`distdoctor nccl-test`: a tiny all_reduce across every rank that never hangs.

torch is imported only inside this package's run path, never by `distdoctor check`.
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--timeout", type=float, default=60.0, help="bound for the whole test, in seconds")


def run(args: argparse.Namespace) -> int:
    import sys

    print("distdoctor nccl-test is not available in this build yet", file=sys.stderr)
    return 2
