"""Benchmark: what `distdoctor nccl-test` costs over the smallest possible all_reduce job.

    python bench/nccl_test_overhead.py [--reps 7] [--srun]

Baseline: two processes that import torch, init_process_group("gloo") and all_reduce once.
Candidate: `distdoctor nccl-test --local 2` (rendezvous, fingerprints, cross-rank comparison,
three checked collectives, the report). The two alternate; the script prints each run's wall
time and the median ratio. Goal: <= 1.15 (the floor is interpreter start-up plus `import
torch` in every rank). With --srun, the same comparison as `srun -N2 -n2` on the two-node test
cluster (needs root; the cluster from tests/harness/slurm.py is started and stopped here).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOAL = 1.15
MINIMAL = """\
import os
import torch
import torch.distributed as dist
rank = int(os.environ.get("RANK") or os.environ["SLURM_PROCID"])
world = int(os.environ.get("WORLD_SIZE") or os.environ["SLURM_NTASKS"])
dist.init_process_group("gloo", rank=rank, world_size=world)
t = torch.ones(4)
dist.all_reduce(t)
assert t[0].item() == world
dist.destroy_process_group()
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def distdoctor() -> list[str]:
    exe = os.path.join(os.path.dirname(sys.executable), "distdoctor")
    return [exe] if os.path.exists(exe) else [sys.executable, "-m", "distdoctor"]


def timed(run) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def local_pair(script: str) -> None:
    port = str(free_port())
    procs = [subprocess.Popen([sys.executable, script],
                              env=dict(os.environ, RANK=str(r), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                                       MASTER_PORT=port)) for r in range(2)]
    codes = [p.wait(120) for p in procs]
    if any(codes):
        raise SystemExit(f"baseline failed: {codes}")


def local_nccl_test() -> None:
    proc = subprocess.run([*distdoctor(), "nccl-test", "--local", "2", "--timeout", "60"],
                          stdout=subprocess.DEVNULL, timeout=120)
    if proc.returncode:
        raise SystemExit(f"nccl-test failed: {proc.returncode}")


def compare(name: str, baseline, candidate, reps: int) -> float:
    baseline()  # warm the page cache for both
    candidate()
    base, cand = [], []
    for i in range(reps):
        base.append(timed(baseline))
        cand.append(timed(candidate))
        print(f"{name} rep {i + 1}: baseline {base[-1]:.3f} s  nccl-test {cand[-1]:.3f} s", flush=True)
    ratios = [c / b for b, c in zip(base, cand)]
    ratio = statistics.median(ratios)
    print(f"{name}: median baseline {statistics.median(base):.3f} s, nccl-test {statistics.median(cand):.3f} s, "
          f"median ratio {ratio:.3f} (goal <= {GOAL}) {'OK' if ratio <= GOAL else 'OVER'}", flush=True)
    return ratio


def srun_comparison(script: str, reps: int) -> float:
    sys.path.insert(0, REPO)
    from tests.harness.slurm import SlurmCluster

    with SlurmCluster(prefix="ddt", net16="10.84") as cluster:
        def baseline() -> None:
            proc = cluster.srun(["-N2", "-n2", sys.executable, script],
                                env={"MASTER_ADDR": "node1", "MASTER_PORT": str(free_port())}, timeout=120)
            if proc.returncode:
                raise SystemExit(f"srun baseline failed: {proc.stderr[-1000:]}")

        def candidate() -> None:
            proc = cluster.srun(["-N2", "-n2", *distdoctor(), "nccl-test", "--timeout", "60"], timeout=120)
            if proc.returncode:
                raise SystemExit(f"srun nccl-test failed: {proc.stdout[-2000:]} {proc.stderr[-1000:]}")

        return compare("srun -N2 -n2", baseline, candidate, reps)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--srun", action="store_true", help="also compare under srun -N2 on the test cluster")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ddt-bench-") as tmp:
        script = os.path.join(tmp, "minimal_allreduce.py")
        with open(script, "w") as fh:
            fh.write(MINIMAL)
        ratios = [compare("--local 2", lambda: local_pair(script), local_nccl_test, args.reps)]
        if args.srun:
            ratios.append(srun_comparison(script, args.reps))
    return 0 if all(r <= GOAL for r in ratios) else 1


if __name__ == "__main__":
    raise SystemExit(main())
