"""How long `distdoctor check` takes next to `python -m torch.utils.collect_env`, the tool
users reach for today. Runs the two alternately and prints the median wall-time ratio.

    python bench/check_latency.py [--pairs 7] [-- extra distdoctor check args]

Goal: ratio <= 0.25.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from alternate import compare, distdoctor_argv  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=7)
    parser.add_argument("extra", nargs="*", help="extra arguments for distdoctor check")
    args = parser.parse_args()
    collect_env = [sys.executable, "-m", "torch.utils.collect_env"]
    check = [*distdoctor_argv(), "check", "--format", "json", *args.extra]
    _a, _b, ratio = compare("python -m torch.utils.collect_env", collect_env, "distdoctor check", check,
                            max(5, args.pairs))
    print(f"ratio (check / collect_env) median {ratio:.3f}  goal <= 0.25")
    return 0


if __name__ == "__main__":
    sys.exit(main())
