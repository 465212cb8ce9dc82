"""Benchmark (SIMULATION): `distdoctor hang`'s verdict over 4,096 ranks' stacks and Flight
Recorder traces, the part that runs on the one node that gathers every node's snapshot.

The snapshots are simulated, labelled as such: 512 nodes x 8 ranks, each main thread 28 frames
deep (a training loop's depth: the job's own frames, then torch.distributed); rank 2,749 sits
in load_batch. Ranks on one code path share their frames; where inside the wait each was caught
varies (the innermost frame's line). Every rank has a Flight Recorder summary of 64 entries
(what a node keeps of each rank's ring), rank 2,749 one collective behind. The verdict
(grouping, Flight Recorder matching, findings) and, as the baseline, json.loads of the same
snapshots (what gathering them costs anyway) run alternately; medians and their ratio are
printed, and the verdict is checked to name rank 2,749 in both.

Goal: the verdict in under a second for 4,096 ranks.

    python bench/hang_scale.py [--ranks 4096] [--repeat 7]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from distdoctor.hang import verdict  # noqa: E402

SITE = "/opt/venv/lib/python3.11/site-packages/"
OUTLIER = 2749


def frames(rank: int, rng: random.Random) -> list:
    own = [["train_step", "train.py", 120, "/home/u/train.py"], ["train", "train.py", 310, "/home/u/train.py"],
           ["main", "train.py", 402, "/home/u/train.py"], ["<module>", "train.py", 410, "/home/u/train.py"]]
    if rank == OUTLIER:
        return [["load_batch", "data.py", 88, "/home/u/data.py"], ["__next__", "data.py", 40, "/home/u/data.py"]] + own
    lib = [[f"layer_{i}", f"torch/nn/modules/m{i}.py", 11 + 7 * i, f"{SITE}torch/nn/modules/m{i}.py"]
           for i in range(21)]
    top = [["wait", "torch/distributed/distributed_c10d.py", rng.choice((3252, 3253, 3261)),
            SITE + "torch/distributed/distributed_c10d.py"],
           ["all_reduce", "torch/distributed/distributed_c10d.py", 3252, SITE + "torch/distributed/distributed_c10d.py"],
           ["_exception_logger.<locals>.wrapper", "torch/distributed/c10d_logger.py", 83,
            SITE + "torch/distributed/c10d_logger.py"]]
    return top + lib + own


def snapshots(n: int) -> list[dict]:
    rng = random.Random(7)
    nodes = []
    for node in range(n // 8):
        name = f"gpu{node:04d}"
        ranks, fr = [], {}
        for local in range(8):
            rank = node * 8 + local
            pid = 10000 + rank
            ranks.append({"process": {"pid": pid, "host": name, "rank": rank, "local_rank": local, "world_size": n,
                                      "job": "slurm 4242.0", "gpu": str(local), "python": True, "cmdline": ["python3"],
                                      "start_ticks": 1000, "env": {}},
                          "stack": {"pid": pid, "error": "", "detail": "", "duration": 0.02,
                                    "threads": [{"name": "MainThread", "tid": pid, "active": False,
                                                 "frames": frames(rank, rng)}]},
                          "state": {"alive": True, "state": "S", "wchan": "futex_wait_queue", "threads": 12,
                                    "cpu_percent": 0.0}})
            last = 5000 - (rank == OUTLIER)
            entries = [["0", s, "all_reduce", "[[1048576]]", "scheduled", False] for s in range(last - 63, last + 1)]
            fr[str(pid)] = {"path": f"/tmp/trace_{rank}", "enabled": True, "pipe": "", "status": "ok", "detail": "",
                            "format": "pickle", "version": "2.10", "group_sizes": {"": n},
                            "pg_status": {"0": {"enqueued": last, "started": -1, "completed": last - 1}},
                            "entries": entries}
        nodes.append({"hang_snapshot": 1, "node": name, "ranks": ranks, "problems": [], "unreadable": 0,
                      "ptrace": {"allowed": True}, "pyspy": "py-spy", "flight_recorder": fr})
    return nodes


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    text = [json.dumps(s) for s in snapshots(args.ranks)]
    print(f"SIMULATION: {args.ranks} ranks on {len(text)} nodes, {sum(map(len, text)) / 2**20:.0f} MiB of snapshots")
    verdict_times, parse_times = [], []
    for _ in range(args.repeat):
        start = time.perf_counter()
        docs = [json.loads(t) for t in text]
        parse_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        runs = verdict.runs(docs, "login1", job_mode=True)
        verdict_times.append(time.perf_counter() - start)
        named = [f.summary for r in runs for f in r.findings if f.status.value == "fail"]
        assert any(s.startswith(f"rank {OUTLIER} on ") and "load_batch" in s for s in named), named[:3]
        assert any(f"rank {OUTLIER} on " in s and "collective #5000" in s for s in named), named[:3]
    v, p = statistics.median(verdict_times), statistics.median(parse_times)
    ratios = [a / b for a, b in zip(verdict_times, parse_times)]
    print(f"verdict (grouping + Flight Recorder + findings): median {v:.3f} s")
    print(f"json.loads of the snapshots (baseline):          median {p:.3f} s")
    print(f"median ratio verdict/baseline: {statistics.median(ratios):.2f}")
    print("goal < 1 s:", "met" if v < 1.0 else "NOT met")
    return 0 if v < 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
