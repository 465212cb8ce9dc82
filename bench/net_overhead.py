"""What the net checks add to `distdoctor check`: alternates `check --skip net` and `check`
(at least 7 pairs), prints both medians and the difference. Budget: 0.1 s.

    python bench/net_overhead.py [--pairs 9] [-- extra check args]
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
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=9)
    parser.add_argument("extra", nargs="*", help="more arguments for `distdoctor check`")
    args = parser.parse_args()
    pairs = max(7, args.pairs)
    base = [*distdoctor(), "check", "--format", "json", *args.extra]
    timed(base)  # warm the page cache and __pycache__
    without, with_net = [], []
    for _ in range(pairs):
        without.append(timed([*base, "--skip", "net"]))
        with_net.append(timed(base))
    m_without, m_with = statistics.median(without), statistics.median(with_net)
    added = [w - o for w, o in zip(with_net, without)]
    print(f"pairs: {pairs}")
    print(f"check --skip net: median {m_without:.3f} s")
    print(f"check:            median {m_with:.3f} s")
    print(f"added by net:     {m_with - m_without:+.3f} s (median of per-pair differences {statistics.median(added):+.3f} s)"
          f"; ratio {m_with / m_without:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
