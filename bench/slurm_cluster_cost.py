"""What one real Slurm test cluster (tests/harness/slurm.py) costs to start and stop, the cost
the session-shared `slurm_cluster` fixture pays once instead of once per test module. Wall and
CPU time (this process and its children: the daemons are reaped at stop) per round, medians.

    sudo python bench/test_cluster_cost.py [--rounds 5] [--nodes 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tests.harness.slurm import SlurmCluster  # noqa: E402


def _cpu() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--nodes", type=int, default=3)
    args = parser.parse_args()
    walls, cpus = [], []
    for _ in range(args.rounds):
        cluster = SlurmCluster(prefix="bench", nodes=args.nodes)
        wall, cpu = time.perf_counter(), _cpu()
        try:
            cluster.start()
        finally:
            cluster.stop()
        walls.append(time.perf_counter() - wall)
        cpus.append(_cpu() - cpu)
    print(f"{args.nodes}-node cluster, start + stop, {args.rounds} rounds, load {os.getloadavg()[0]:.1f}: "
          f"wall median {statistics.median(walls):.2f} s [{min(walls):.2f}-{max(walls):.2f}], "
          f"CPU median {statistics.median(cpus):.2f} s [{min(cpus):.2f}-{max(cpus):.2f}] "
          "(daemons' CPU counts when they are reaped)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
