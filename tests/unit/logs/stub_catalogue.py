"""A three-entry catalogue in the shape of distdoctor/logs/signatures.py, so the diagnosis logic
is tested on signatures whose meaning the tests fix (the real catalogue is tested on its own
and, end to end, in test_fixtures.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Sig:
    id: str
    title: str
    category: str
    patterns: tuple
    keywords: tuple
    meaning: str
    fix: tuple
    confirm: str
    sources: tuple
    severity: str
    consequence_of: tuple = ()

    def matches(self, line: str) -> bool:
        return any(k in line for k in self.keywords) and any(p.search(line) for p in self.patterns)

    def fix_for(self, host: str = "", rank="", line: str = "", context=frozenset()) -> tuple:
        values = {"host": host or "{host}", "rank": str(rank) if rank != "" else "{rank}"}
        return tuple(line.format_map(values) for line in self.fix)


class Matcher:
    def __init__(self, signatures):
        self.signatures = tuple(signatures)

    def match(self, line: str):
        return next((s for s in self.signatures if s.matches(line)), None)


STUB = Matcher([
    Sig("cuda.out-of-memory", "CUDA out of memory", "cuda", (re.compile(r"CUDA out of memory|CUDA error: out of memory"),),
        ("out of memory",), "The GPU ran out of memory.", ("ssh {host} nvidia-smi", "# lower the batch size of rank {rank}"),
        "gpu.memory", ("pytorch/pytorch#1",), "root"),
    Sig("torch.watchdog-timeout", "NCCL watchdog timeout", "torch",
        (re.compile(r"Watchdog caught collective operation timeout"),), ("Watchdog caught",),
        "A collective did not finish in time: another rank failed or hangs.", ("# look at the rank that failed first",),
        "", ("pytorch/pytorch#2",), "consequence", ("cuda.out-of-memory", "nccl.connect-failed")),
    Sig("nccl.connect-failed", "NCCL could not connect to a peer", "nccl",
        (re.compile(r"Connect to \S+ failed|returned \d+\(No route to host\)|Call to connect timeout"),),
        ("Connect to", "Call to connect"), "A peer's address is unreachable.",
        ("ssh {host} ip route", "export NCCL_SOCKET_IFNAME=eth0"), "reach.ports", ("NVIDIA/nccl#1105",), "root"),
])
