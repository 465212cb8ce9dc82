"""Network namespaces for tests: unique names, created with iproute2, always deleted.

    with Namespaces("net") as ns:
        a = ns.add("a")                     # -> "<run tag>net" + "a" (tests/harness/runprefix.py)
        ns.veth("a", "eth0", "b", "eth0")   # a veth pair between two namespaces
        ns.run("a", ["ip", "addr", "add", f"{RUN.subnet('net.netns')}.1/24", "dev", "eth0"])

Names start with the run's tag (DISTDOCTOR_TEST_PREFIX and the pid), so two runs of the suite
never touch each other's namespaces.
"""

from __future__ import annotations

import os
import signal
import subprocess
from typing import Sequence

import pytest

from tests.harness import apt
from tests.harness.runprefix import RUN


def require_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")


class Namespaces:
    _veths = 0  # every veth pair this process makes gets its own temporary names

    def __init__(self, area: str):
        require_root()
        apt.ensure("iproute2")
        self.prefix = RUN.name(area)
        self.names: list[str] = []

    def __enter__(self) -> "Namespaces":
        return self

    def __exit__(self, *exc) -> None:
        self.cleanup()

    def name(self, short: str) -> str:
        return f"{self.prefix}{short}"

    def add(self, short: str) -> str:
        name = self.name(short)
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=10)
        subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True, timeout=10)
        self.names.append(name)
        self.run(short, ["ip", "link", "set", "lo", "up"])
        return name

    def run(self, short: str | None, argv: Sequence[str], check: bool = True, timeout: float = 30,
            **kw) -> subprocess.CompletedProcess:
        cmd = list(argv) if short is None else ["ip", "netns", "exec", self.name(short), *argv]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
        if check and proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()}")
        return proc

    def veth(self, a: str | None, a_if: str, b: str | None, b_if: str) -> None:
        """A veth pair with one end in namespace a (None: the root namespace) named a_if and the
        other in b named b_if. Temporary names avoid clashes in the root namespace."""
        Namespaces._veths += 1
        tmp_a, tmp_b = (RUN.ifname(side, Namespaces._veths % 1000) for side in "ab")
        subprocess.run(["ip", "link", "add", tmp_a, "type", "veth", "peer", "name", tmp_b], check=True,
                       capture_output=True, timeout=10)
        for tmp, ns, final in ((tmp_a, a, a_if), (tmp_b, b, b_if)):
            if ns is not None:
                subprocess.run(["ip", "link", "set", tmp, "netns", self.name(ns)], check=True,
                               capture_output=True, timeout=10)
            self.run(ns, ["ip", "link", "set", tmp, "name", final])
            self.run(ns, ["ip", "link", "set", final, "up"])

    def lan(self, hosts: Sequence[str], subnet: str, switch: str = "sw") -> None:
        """One namespace per host, each with eth0 = subnet.(i+1)/24 on a bridge br0 in `switch`
        (whose port to host i is p<i>)."""
        self.add(switch)
        self.run(switch, ["ip", "link", "add", "br0", "type", "bridge"])
        self.run(switch, ["ip", "link", "set", "br0", "up"])
        for i, name in enumerate(hosts):
            self.add(name)
            self.veth(name, "eth0", switch, f"p{i}")
            self.run(switch, ["ip", "link", "set", f"p{i}", "master", "br0"])
            self.run(name, ["ip", "addr", "add", f"{subnet}.{i + 1}/24", "dev", "eth0"])

    def pids(self, short: str) -> list[int]:
        proc = subprocess.run(["ip", "netns", "pids", self.name(short)], capture_output=True, text=True, timeout=10)
        return [int(p) for p in proc.stdout.split() if p.isdigit()]

    def cleanup(self) -> None:
        for name in reversed(self.names):
            short = name[len(self.prefix):]
            for pid in self.pids(short):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=10)
        self.names.clear()
