"""Benchmark: `distdoctor nccl-test` on four real (namespaced) hosts against two.

    sudo python bench/nccltest_hosts.py [--pairs 5] [--timeout 40]

Four network namespaces on one bridge, each with its own hostname (UTS namespace) and one
rank started by environment variables as a launcher would. The two-host job (h0, h1) and the
four-host job (h0..h3) alternate, so drift in machine load hits both alike; each run's wall
time is from starting the ranks to the last one's exit. The mesh grows from 2 to 12 host
pairs and the collectives from 2 to 4 ranks; the goal is a median ratio <= 1.3.

On one machine the "hosts" share its CPUs, and `import torch` is CPU-bound: on 2 cores four
ranks importing at once take about twice as long as two, whatever distdoctor does. So the
script also prints a floor (the same 2 and 4 processes doing only `import torch`), and the
time rank 0 spent after its import (from the report's `nccl_test.phases`): the part of the
run that is distdoctor's protocol, which is what must scale.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from bench.alternate import distdoctor_argv  # noqa: E402
from tests.harness.netns import Namespaces  # noqa: E402

GOAL = 1.3
HOSTS = ("h0", "h1", "h2", "h3")
_LAUNCHER = ("SLURM_", "OMPI_", "PMI_", "PMIX_", "TORCHELASTIC_", "MASTER_", "RANK", "LOCAL_RANK", "WORLD_SIZE",
             "LOCAL_WORLD_SIZE", "GROUP_RANK")


def floor(ns: Namespaces, hosts: int) -> float:
    """Wall seconds of `import torch` in one process per host, all at once."""
    start = time.perf_counter()
    procs = [subprocess.Popen(["ip", "netns", "exec", ns.name(HOSTS[i]), sys.executable, "-c",
                               "import torch, torch.distributed"]) for i in range(hosts)]
    for proc in procs:
        proc.wait(300)
    return time.perf_counter() - start


def after_import(report: str) -> float:
    """Rank 0's seconds after `import torch`, from its report."""
    try:
        phases = json.loads(report)["nccl_test"]["phases"]
    except (ValueError, KeyError, TypeError):
        return float("nan")
    return sum(p["seconds"] for p in phases if p["phase"] not in ("start", "import torch"))


def job(ns: Namespaces, hosts: int, subnet: str, port: int, timeout: float) -> tuple[float, list[int], float]:
    """Wall seconds of one job with one rank per host, the exit codes, and rank 0's seconds
    after its import."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(_LAUNCHER)}
    procs = []
    start = time.perf_counter()
    for rank in range(hosts):
        env = dict(base, RANK=str(rank), LOCAL_RANK="0", WORLD_SIZE=str(hosts), MASTER_ADDR=f"{subnet}.1",
                   MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="eth0")
        argv = ["ip", "netns", "exec", ns.name(HOSTS[rank]), "unshare", "--uts", "sh", "-c",
                f'hostname {HOSTS[rank]} && exec "$@"', "sh", *distdoctor_argv(), "nccl-test", "--timeout",
                str(timeout), *(["--json"] if rank == 0 else [])]
        procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE if rank == 0 else subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL, text=True, start_new_session=True))
    codes = []
    out = ""
    for proc in procs:
        try:
            if proc.stdout is not None:
                out = proc.communicate(timeout=timeout + 30)[0]
            codes.append(proc.wait(timeout + 30))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            codes.append(proc.wait())
    return time.perf_counter() - start, codes, after_import(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=40)
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("needs root (network namespaces)", file=sys.stderr)
        return 64
    subnet = f"10.122.{os.getpid() % 250 + 1}"
    with Namespaces("qcb") as ns:
        ns.lan(HOSTS, subnet)
        walls: dict[int, list[float]] = {2: [], 4: []}
        protocol: dict[int, list[float]] = {2: [], 4: []}
        floors: dict[int, list[float]] = {2: [], 4: []}
        port = 33500
        job(ns, 2, subnet, port, args.timeout)  # warm: page cache, __pycache__
        for i in range(args.pairs):
            for hosts in (2, 4):
                port += 1
                wall, codes, mine = job(ns, hosts, subnet, port, args.timeout)
                walls[hosts].append(wall)
                protocol[hosts].append(mine)
                floors[hosts].append(floor(ns, hosts))
                print(f"pair {i + 1}: {hosts} hosts {wall:.2f} s (rank 0 after import {mine:.2f} s; import torch "
                      f"alone {floors[hosts][-1]:.2f} s)  exit codes {codes}", flush=True)
                if any(codes):
                    print(f"warning: a {hosts}-host run did not pass", file=sys.stderr)
    for label, data in (("nccl-test wall", walls), ("rank 0 after import torch", protocol),
                        ("floor: import torch only", floors)):
        ratio = statistics.median(b / a for a, b in zip(data[2], data[4], strict=True))
        print(f"{label:<26} two hosts {statistics.median(data[2]):.2f} s, four hosts {statistics.median(data[4]):.2f} s,"
              f" median ratio {ratio:.3f}")
    for hosts in (2, 4):
        excess = statistics.median(w - f for w, f in zip(walls[hosts], floors[hosts], strict=True))
        print(f"{hosts} hosts: nccl-test wall over the import-only floor, median {excess:+.2f} s")
    print(f"goal: ratio <= {GOAL} (on real hosts, where each has its own CPUs for the import)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
