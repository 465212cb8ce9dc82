"""What the build checks add to `distdoctor check`.

Alternates `distdoctor check --skip build` and `distdoctor check` (so drift in machine load
hits both alike) and prints the medians, their difference and ratio. Extra arguments are
passed to both commands, e.g. `--only host,build` to isolate the build checks from slower
areas.

    python bench/build_overhead.py [--pairs 9] [-- extra distdoctor args]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time


def distdoctor() -> list[str]:
    exe = os.path.join(os.path.dirname(sys.executable), "distdoctor")
    if os.path.exists(exe):
        return [exe]
    return [shutil.which("distdoctor") or sys.executable, *([] if shutil.which("distdoctor") else ["-m", "distdoctor"])]


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=300)
    elapsed = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        sys.exit(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr[-500:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=9, help="alternating pairs to run (at least 7)")
    parser.add_argument("extra", nargs="*", help="arguments added to both commands")
    args = parser.parse_args()
    base = [*distdoctor(), "check", "--format", "json", *args.extra]
    without, with_build = [], []
    timed(base)  # warm the page cache and pip metadata once
    for _ in range(max(7, args.pairs)):
        without.append(timed([*base, "--skip", "build"]))
        with_build.append(timed(base))
    a, b = statistics.median(without), statistics.median(with_build)
    print(f"pairs: {len(without)}")
    print(f"distdoctor check --skip build : median {a:.3f} s  (min {min(without):.3f}, max {max(without):.3f})")
    print(f"distdoctor check              : median {b:.3f} s  (min {min(with_build):.3f}, max {max(with_build):.3f})")
    print(f"build checks add {b - a:+.3f} s; ratio {b / a:.2f}")


if __name__ == "__main__":
    main()
