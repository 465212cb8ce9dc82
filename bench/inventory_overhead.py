"""What the node inventory adds to `distdoctor check --format json`: alternates
`check --format prometheus` (no inventory) and `check --format json` (the same checks, plus the
inventory) and prints the medians, the difference and the ratio; then times `distdoctor
inventory` alone.

    python bench/inventory_overhead.py [--pairs 7] [-- extra check args]

Most inventory facts are the checks' own (cached, shared); what it adds is the rest: the
--version of gcc/clang/cmake/nvcc, /etc/os-release, /proc/cpuinfo, the dist-info listing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from alternate import compare, distdoctor_argv, timed  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=7, help="alternating pairs (at least 5)")
    parser.add_argument("extra", nargs="*", help="arguments added to both check commands")
    args = parser.parse_args()
    base = [*distdoctor_argv(), "check", *args.extra]
    pairs = max(5, args.pairs)
    compare("check --format prometheus (no inventory)", [*base, "--format", "prometheus"],
            "check --format json (with inventory)", [*base, "--format", "json"], pairs)
    alone = [timed([*distdoctor_argv(), "inventory"]) for _ in range(pairs)]
    print(f"distdoctor inventory alone: median {statistics.median(alone):.3f} s "
          f"(min {min(alone):.3f}, max {max(alone):.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
