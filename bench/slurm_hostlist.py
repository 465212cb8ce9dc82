"""How much does asking `scontrol show hostnames` cost, compared with the pure library?

The slurm_env fact expands up to three nodelists per run. This alternates the two ways of
expanding a realistic nodelist and prints the median time of each and their ratio. It needs
scontrol and a slurm.conf; a throwaway one is written when SLURM_CONF is not set.

    python bench/slurm_hostlist.py [rounds]
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time

from distdoctor.facts.slurm import library_expander, scontrol_expander
from distdoctor.host import Host

EXPR = "gpu[001-064,100-163],login-a[1-2],r[1-4]n[01-16]"


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    with tempfile.TemporaryDirectory(prefix="dds-bench-") as tmp:
        env = dict(os.environ)
        if "SLURM_CONF" not in env:
            env["SLURM_CONF"] = os.path.join(tmp, "slurm.conf")
            with open(env["SLURM_CONF"], "w") as fh:
                fh.write("ClusterName=bench\nSlurmctldHost=localhost\nNodeName=a\nPartitionName=p Nodes=a\n")
        compare(Host(env), rounds)


def compare(host: Host, rounds: int) -> None:
    if not host.which("scontrol"):
        sys.exit("scontrol is not installed")
    library, scontrol = [], []
    for _ in range(rounds):
        t = time.perf_counter()
        hosts_lib, _ = library_expander(EXPR)
        library.append(time.perf_counter() - t)
        t = time.perf_counter()
        hosts_sc, tool = scontrol_expander(host)(EXPR)  # a fresh expander: no cache between rounds
        scontrol.append(time.perf_counter() - t)
        assert tool == "scontrol" and hosts_sc == hosts_lib, (tool, len(hosts_sc), len(hosts_lib))
    lib, sc = statistics.median(library), statistics.median(scontrol)
    print(f"{len(hosts_lib)} hosts from {EXPR!r}")
    print(f"library (ClusterShell RangeSet, Slurm order): median {lib * 1000:.2f} ms")
    print(f"library check + scontrol show hostnames:      median {sc * 1000:.2f} ms")
    print(f"ratio scontrol/library: {sc / lib:.1f}x over {rounds} alternating rounds")


if __name__ == "__main__":
    main()
