"""Benchmark: `distdoctor nccl-test` on four real (namespaced) hosts against two.

    sudo python bench/nccltest_hosts.py [--pairs 5] [--timeout 40]

Four network namespaces on one bridge, each with its own hostname (UTS namespace) and one
rank started by environment variables as a launcher would. The two-host job (h0, h1) and the
four-host job (h0..h3) alternate, so drift in machine load hits both alike; each run's wall
time is from starting the ranks to the last one's exit. The mesh grows from 2 to 12 host
pairs and the collectives from 2 to 4 ranks; the goal is a median ratio <= 1.3 (the floor is
interpreter start-up and `import torch` in every rank, which run in parallel).
"""

from __future__ import annotations

import argparse
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


def lan(ns: Namespaces, subnet: str) -> None:
    ns.add("sw")
    ns.run("sw", ["ip", "link", "add", "br0", "type", "bridge"])
    ns.run("sw", ["ip", "link", "set", "br0", "up"])
    for i, name in enumerate(HOSTS):
        ns.add(name)
        ns.veth(name, "eth0", "sw", f"p{i}")
        ns.run("sw", ["ip", "link", "set", f"p{i}", "master", "br0"])
        ns.run(name, ["ip", "addr", "add", f"{subnet}.{i + 1}/24", "dev", "eth0"])


def job(ns: Namespaces, hosts: int, subnet: str, port: int, timeout: float) -> tuple[float, list[int]]:
    """Wall seconds of one job with one rank per host, and the exit codes."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(_LAUNCHER)}
    procs = []
    start = time.perf_counter()
    for rank in range(hosts):
        env = dict(base, RANK=str(rank), LOCAL_RANK="0", WORLD_SIZE=str(hosts), MASTER_ADDR=f"{subnet}.1",
                   MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="eth0")
        argv = ["ip", "netns", "exec", ns.name(HOSTS[rank]), "unshare", "--uts", "sh", "-c",
                f'hostname {HOSTS[rank]} && exec "$@"', "sh", *distdoctor_argv(), "nccl-test", "--timeout",
                str(timeout), *(["--json"] if rank == 0 else [])]
        procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                      start_new_session=True))
    codes = []
    for proc in procs:
        try:
            codes.append(proc.wait(timeout + 30))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            codes.append(proc.wait())
    return time.perf_counter() - start, codes


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
        lan(ns, subnet)
        two, four = [], []
        port = 33500
        job(ns, 2, subnet, port, args.timeout)  # warm: page cache, __pycache__
        for i in range(args.pairs):
            for hosts, times in ((2, two), (4, four)):
                port += 1
                wall, codes = job(ns, hosts, subnet, port, args.timeout)
                times.append(wall)
                print(f"pair {i + 1}: {hosts} hosts {wall:.2f} s  exit codes {codes}", flush=True)
                if any(codes):
                    print(f"warning: a {hosts}-host run did not pass", file=sys.stderr)
    ratio = statistics.median(b / a for a, b in zip(two, four, strict=True))
    print(f"two hosts   median {statistics.median(two):.2f} s  (min {min(two):.2f}, max {max(two):.2f})")
    print(f"four hosts  median {statistics.median(four):.2f} s  (min {min(four):.2f}, max {max(four):.2f})")
    print(f"median ratio four/two {ratio:.3f} (goal <= {GOAL})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
