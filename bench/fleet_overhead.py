"""Benchmark: what `distdoctor fleet` costs over the slowest node's own `check`.

On the real test cluster (tests/harness/slurm.py: nodes in network namespaces, needs root),
alternately:

  node     `srun -N1 -w <node> distdoctor check --node-report` for each node in turn: one
           node's check as srun runs it (the slowest of the nodes counts)
  fleet    `distdoctor fleet --nodes node[1-N] --format json`: every node at once, gathered,
           compared and rendered

Goal: fleet <= slowest node + 1 s. Prints the medians, the difference and the median ratio.

    sudo python bench/fleet_overhead.py [--pairs 5] [--nodes 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from alternate import distdoctor_argv, timed  # noqa: E402

from tests.harness.slurm import SlurmCluster  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--nodes", type=int, default=3)
    args = parser.parse_args()
    cluster = SlurmCluster(prefix="qb", net16="10.121", nodes=args.nodes)
    cluster.start()
    try:
        dd = [sys.executable, "-m", "distdoctor"]
        env = cluster.env
        fleet = distdoctor_argv() + ["fleet", "--nodes", f"node[1-{args.nodes}]", "--format", "json"]
        timed(fleet, env)  # warm
        slowest, fleets = [], []
        for _ in range(args.pairs):
            per_node = [timed(["srun", "-N1", "-n1", "-w", node, *dd, "check", "--node-report"], env)
                        for node in cluster.nodes]
            slowest.append(max(per_node))
            fleets.append(timed(fleet, env))
        med_s, med_f = statistics.median(slowest), statistics.median(fleets)
        ratio = statistics.median(f / s for s, f in zip(slowest, fleets))
        print(f"pairs: {args.pairs}, nodes: {args.nodes}")
        print(f"slowest node's check (srun -N1)  median {med_s:.3f} s  (min {min(slowest):.3f}, max {max(slowest):.3f})")
        print(f"fleet over all nodes             median {med_f:.3f} s  (min {min(fleets):.3f}, max {max(fleets):.3f})")
        print(f"difference {med_f - med_s:+.3f} s (goal <= +1 s); median ratio {ratio:.3f}")
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
