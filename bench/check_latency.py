"""How long `distdoctor check` takes next to `python -m torch.utils.collect_env`, the tool
users reach for today. Runs the two alternately and prints the median wall-time ratio.

    python bench/check_latency.py [--pairs 7] [-- extra distdoctor check args]

Goal: ratio <= 0.25.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
    elapsed = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        print(f"warning: {' '.join(argv)} exited {proc.returncode}", file=sys.stderr)
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=7)
    parser.add_argument("extra", nargs="*", help="extra arguments for distdoctor check")
    args = parser.parse_args()
    exe = os.path.join(os.path.dirname(sys.executable), "distdoctor")
    dd = [exe] if os.path.exists(exe) else [sys.executable, "-m", "distdoctor"]
    dd = [*dd, "check", "--format", "json", *args.extra]
    baseline = [sys.executable, "-m", "torch.utils.collect_env"]
    timed(dd), timed(baseline)  # warm the page cache for both
    ours, theirs = [], []
    for _ in range(args.pairs):
        ours.append(timed(dd))
        theirs.append(timed(baseline))
    ratios = [a / b for a, b in zip(ours, theirs)]
    print(f"distdoctor check        median {statistics.median(ours):.3f} s  (min {min(ours):.3f}, max {max(ours):.3f})")
    print(f"torch collect_env       median {statistics.median(theirs):.3f} s  (min {min(theirs):.3f}, max {max(theirs):.3f})")
    print(f"ratio (check/collect_env) median {statistics.median(ratios):.3f}  goal <= 0.25")
    return 0


if __name__ == "__main__":
    sys.exit(main())
