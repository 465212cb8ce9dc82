"""What one area's checks add to `distdoctor check`: alternates `check --skip AREA` and
`check` and prints the medians, the difference and the ratio.

    python bench/area_overhead.py --area net [--pairs 9] [-- extra check args]

Budgets: net adds at most 0.1 s (issue 3); build is dominated by one `ompi_info` (~0.22 s).
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from alternate import compare, distdoctor_argv  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--area", required=True, help="net, build, gpu, slurm, reach, host")
    parser.add_argument("--pairs", type=int, default=9, help="alternating pairs (at least 7)")
    parser.add_argument("extra", nargs="*", help="arguments added to both commands")
    args = parser.parse_args()
    base = [*distdoctor_argv(), "check", "--format", "json", *args.extra]
    compare(f"check --skip {args.area}", [*base, "--skip", args.area], "check", base, max(7, args.pairs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
