"""Benchmark (SIMULATION): nccl-test's store traffic, mesh planning and localisation at scale.

One process runs the real protocol and policy code for every rank of a simulated job
(distdoctor/nccltest/simulate.py: a counting store, simulated probes). Printed:

- store messages per rank, followers / host leaders / rank 0, at 512 x 8 and 4096 x 8 ranks, and
  the ratio 4096 : 512 of the per-rank maximum (goal: 1.0, flat in N; rank 0 grows with hosts);
  the fingerprint keys rank 0 reads (one per host) against the previous scheme's (one per rank);
- planning time (mesh_pairs + schedule) for 512 and 4096 hosts, runs alternated, medians
  (goal: < 1 s at 4096 hosts x 8);
- localisation of one slow host among 512: rounds until it is named and rounds in all, over
  several seeds and positions (goal: <= 10).

    python bench/nccltest_scale.py [--repeat 5] [--seeds 10]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from distdoctor.nccltest import plan
from distdoctor.nccltest.localise import HOST
from distdoctor.nccltest.simulate import Fabric, hostname, simulate

RANKS_PER_HOST = 8


def traffic(n_hosts: int) -> dict[str, float]:
    started = time.perf_counter()
    outcome = simulate(n_hosts, RANKS_PER_HOST, Fabric(n_hosts, speed={n_hosts // 3: 0.005}))
    wall = time.perf_counter() - started
    others = [r for r in outcome.messages if r]
    leaders = [r for r in others if r % RANKS_PER_HOST == 0]
    followers = [r for r in others if r % RANKS_PER_HOST]
    assert [c.hosts for c in outcome.mesh_culprits] == [(hostname(n_hosts // 3),)], outcome.mesh_culprits
    return {"ranks": n_hosts * RANKS_PER_HOST,
            "follower": max(outcome.messages[r] for r in followers),
            "leader": max(outcome.messages[r] for r in leaders),
            "median": statistics.median(outcome.messages.values()),
            "max_not_0": max(outcome.messages[r] for r in others),
            "bytes_max_not_0": max(outcome.bytes[r] for r in others),
            "rank0": outcome.messages[0], "rank0_bytes": outcome.bytes[0],
            "pairs": outcome.mesh_pairs, "rounds": outcome.mesh_rounds, "wall": wall,
            "compare": outcome.compare_seconds}


def planning(n_hosts: int) -> float:
    started = time.perf_counter()
    pairs = plan.mesh_pairs(n_hosts)
    plan.schedule(pairs, n_hosts // 2)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--seeds", type=int, default=10)
    args = parser.parse_args()

    print("store traffic per rank (SIMULATION: messages = set/get/add/wait calls)")
    rows = {n: traffic(n) for n in (512, 4096)}
    print(f"{'hosts x 8':>10} {'ranks':>6} {'follower':>8} {'leader':>6} {'median':>6} {'max!=0':>6} "
          f"{'bytes!=0':>8} {'rank 0':>7} {'fp keys':>7} {'old':>6} {'pairs':>6} {'rounds':>6} {'sim s':>6}")
    for n, r in rows.items():
        old = r["ranks"] - 1  # previous scheme: rank 0 read fp/<rank> of every other rank
        print(f"{n:>10} {r['ranks']:>6} {r['follower']:>8} {r['leader']:>6} {r['median']:>6} {r['max_not_0']:>6} "
              f"{r['bytes_max_not_0']:>8} {r['rank0']:>7} {n:>7} {old:>6} {r['pairs']:>6} {r['rounds']:>6} "
              f"{r['wall']:>6.2f}")
    print(f"per-rank max (rank 0 aside), 4096 : 512 hosts = {rows[4096]['max_not_0'] / rows[512]['max_not_0']:.2f} "
          "(goal 1.00)")
    print(f"rank 0, 4096 : 512 hosts = {rows[4096]['rank0'] / rows[512]['rank0']:.2f} (hosts grew 8x)")
    print("fingerprint comparison on rank 0 (nccltest.compare over every rank): "
          + ", ".join(f"{r['ranks']} ranks {r['compare'] * 1000:.0f} ms" for r in rows.values()))

    print("\nplanning time (mesh_pairs + schedule), runs alternated")
    times: dict[int, list[float]] = {512: [], 4096: []}
    planning(512), planning(4096)  # warm
    for _ in range(args.repeat):
        for n in (512, 4096):
            times[n].append(planning(n))
    for n, ts in times.items():
        print(f"{n:>5} hosts: median {statistics.median(ts) * 1000:.0f} ms (min {min(ts) * 1000:.0f}, "
              f"max {max(ts) * 1000:.0f}) over {len(ts)} runs")
    ratios = [b / a for a, b in zip(times[512], times[4096])]
    print(f"4096 : 512 hosts = {statistics.median(ratios):.1f}x (hosts grew 8x); goal < 1 s at 4096 hosts")

    print("\nlocalisation of one slow host among 512 (pair tests in disjoint rounds)")
    named, total = [], []
    for seed in range(args.seeds):
        slow = (seed * 97 + 5) % 512
        outcome = simulate(512, 1, Fabric(512, speed={slow: 0.005}, seed=seed), seed=seed)
        got = [(c.kind, c.hosts) for c in outcome.localise_culprits]
        assert got == [(HOST, (hostname(slow),))], got
        named.append(outcome.localise_named_at)
        total.append(outcome.localise_rounds)
    print(f"named after {statistics.median(named):.0f} rounds (max {max(named)}), search ends after "
          f"{statistics.median(total):.0f} (max {max(total)}) over {args.seeds} seeds; goal <= 10")
    return 0


if __name__ == "__main__":
    sys.exit(main())
