"""`distdoctor check` cold and warm next to `python -m torch.utils.collect_env`, the tool users
reach for today. Runs the three in turn, `--pairs` rounds, and prints each median wall time and
the median per-round ratios.

    python bench/check_speed.py [--pairs 7] [-- extra distdoctor check args]

cold: a fresh, empty tool cache (XDG_CACHE_HOME in a new temporary directory each round), so
ompi_info, ldconfig -p and the MPI launchers' --version really run; warm: the second run with
the same cache. Goals (issue 15): warm / collect_env <= 0.12, cold / collect_env <= 0.25.

Python's own bytecode cache matters as much: a clone run with PYTHONDONTWRITEBYTECODE=1 compiles
every module on every run (a wheel install is byte-compiled by pip). This script runs the
commands without that variable, as an installed tool runs, and says so.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from alternate import distdoctor_argv, timed  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=7)
    parser.add_argument("extra", nargs="*", help="extra arguments for distdoctor check")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    collect_env = [sys.executable, "-W", "ignore", "-m", "torch.utils.collect_env"]
    check = [*distdoctor_argv(), "check", *args.extra]
    scratch = tempfile.mkdtemp(prefix="distdoctor-bench-")
    try:
        # Warm-up: page cache and __pycache__ for both tools.
        timed(collect_env, env)
        timed(check, dict(env, XDG_CACHE_HOME=os.path.join(scratch, "warmup")))
        rows: dict[str, list[float]] = {"collect_env": [], "check cold": [], "check warm": []}
        for round_ in range(max(3, args.pairs)):
            cache_env = dict(env, XDG_CACHE_HOME=os.path.join(scratch, f"round{round_}"))
            rows["collect_env"].append(timed(collect_env, env))
            rows["check cold"].append(timed(check, cache_env))
            rows["check warm"].append(timed(check, cache_env))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"rounds: {len(rows['collect_env'])}  (check: {' '.join(check[1:])}; bytecode cache on)")
    for label, times in rows.items():
        print(f"{label:<12} median {statistics.median(times):.3f} s  (min {min(times):.3f}, max {max(times):.3f})")
    for label, goal in (("check cold", 0.25), ("check warm", 0.12)):
        ratio = statistics.median(c / b for c, b in zip(rows[label], rows["collect_env"]))
        print(f"{label} / collect_env: median ratio {ratio:.3f}  (goal <= {goal})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
