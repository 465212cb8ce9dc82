"""What keeps two runs of the suite apart on one machine: one environment variable.

    DISTDOCTOR_TEST_PREFIX=ht133 python -m pytest      # default: dd82

The value is 1-2 lower-case letters and a number from 1 to 254. Every network namespace,
bridge, veth and base directory the tests create starts with the value and the pid
(`dd82-00k3x...`); every subnet is a
/24 inside 10.<number>.0.0/16; every port a test picks is taken from the run's own block of 80
below the kernel's ephemeral range (10000 + 80 * number), so a port picked by one run is never
the one another run, or an outgoing connection, is handed. Two runs with different numbers
therefore share nothing; two runs with the same value still differ in their names (the pid is
in them) but may clash on fixed subnets: give each concurrent run its own number.

The workers of one run (pytest-xdist, `-n N`) are one run: they share the value, and each has
its own pid, so names differ. A file's fixed subnets are safe because the suite sends every
test of a file to one worker (tests/conftest.py). Ports and the free /24s are shared out: a port
handed to one worker is leased in a file beside the run's other leases, so no other worker of
the run is handed it until the lease has aged (a test binds its port within seconds), and each
worker looks for a free /24 only among its own share of the free block.

Third octets of the /16 are allotted here, in one table, so that two test files never build the
same subnet in the root namespace: fixed blocks for the files that need fixed addresses, and
the rest for harnesses that look for a free /24 (the Slurm clusters).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import socket
import time
from dataclasses import dataclass

VARIABLE = "DISTDOCTOR_TEST_PREFIX"
DEFAULT = "dd82"

# Linux hands out ephemeral ports from 32768 by default (net.ipv4.ip_local_port_range): blocks
# below it are never given to an outgoing connection or to a bind to port 0.
_PORT_BASE = 10000
PORTS_PER_RUN = 80
IFNAMSIZ = 15

# third octet of 10.<number>.X.0/24 -> who builds it. A file takes a block, never one outside it.
SUBNETS = {
    "sshd": range(7, 8),           # tests/harness/sshd.py's example and its default
    "net.netns": range(10, 40),    # tests/integration/net/test_netns.py
    "net.reachability": range(40, 50),
    "cluster.fleet_ssh": range(50, 60),
    "nccltest.hosts": range(60, 61),
    "nccltest.netns": range(61, 62),
    "reach": range(62, 70),        # tests/integration/reach/test_real.py
    "hang.ssh": range(70, 72),     # tests/integration/hang/test_hosts_ssh.py
    "nccltest.nat": range(72, 74),  # tests/integration/nccltest/test_nat.py: outside, inside
    "net.ipv6": range(74, 75),     # tests/integration/net/test_ipv6_noise.py
    "free": range(100, 251),       # harnesses that look for an unused /24 (slurm.py)
}

_VALUE = re.compile(r"([a-z]{1,2})([0-9]{1,3})")


class PrefixError(ValueError):
    pass


def _base36(n: int, width: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while n or len(out) < width:
        n, r = divmod(n, 36)
        out = digits[r] + out
    return out


@dataclass(frozen=True)
class RunPrefix:
    value: str
    octet: int
    pid: int

    @classmethod
    def parse(cls, value: str, pid: int | None = None) -> "RunPrefix":
        match = _VALUE.fullmatch(value)
        if not match or not 1 <= int(match.group(2)) <= 254 or match.group(2).startswith("0"):
            raise PrefixError(f"{VARIABLE}={value!r}: expected 1-2 lower-case letters and a number from 1 to 254 "
                              f"(the second octet of the run's 10.N.0.0/16), e.g. {DEFAULT}")
        return cls(value, int(match.group(2)), os.getpid() if pid is None else pid)

    @classmethod
    def from_env(cls) -> "RunPrefix":
        return cls.parse(os.environ.get(VARIABLE) or DEFAULT)

    # --- names ----------------------------------------------------------------------------

    @property
    def tag(self) -> str:
        """The value and this process: the start of every name. The pid is five base-36 digits
        (every Linux pid fits), so interface names stay within 15 characters and no two
        (value, pid, parts) spell the same name: the dash ends the value, the width the pid."""
        return f"{self.value}-{_base36(self.pid, 5)}"

    def name(self, *parts: object) -> str:
        """A namespace, directory or cluster name (no length limit)."""
        return self.tag + "".join(str(p) for p in parts)

    def ifname(self, *parts: object) -> str:
        """A network interface name in the root namespace (bridge, veth): at most 15 characters,
        or an error saying so, never a silent truncation that could merge two names."""
        name = self.name(*parts)
        if len(name) > IFNAMSIZ:
            raise PrefixError(f"interface name {name!r} is longer than {IFNAMSIZ} characters: "
                              f"shorten {VARIABLE} or the name's parts")
        return name

    # --- subnets --------------------------------------------------------------------------

    @property
    def net16(self) -> str:
        return f"10.{self.octet}"

    def subnet(self, owner: str, index: int = 0) -> str:
        """The index-th /24 of owner's block, as 'a.b.c' (append '.host')."""
        block = SUBNETS[owner]
        if not 0 <= index < len(block):
            raise PrefixError(f"{owner} has {len(block)} subnet(s) in runprefix.SUBNETS; index {index} is outside")
        return f"{self.net16}.{block[index]}"

    # --- ports ----------------------------------------------------------------------------

    @property
    def ports(self) -> range:
        start = _PORT_BASE + PORTS_PER_RUN * self.octet
        return range(start, start + PORTS_PER_RUN)

    def free_subnets(self, worker: int, workers: int) -> list[str]:
        """This worker's share of the free block: the /24s it alone may look in."""
        block = len(SUBNETS["free"])
        return [self.subnet("free", i) for i in range(block) if i % max(workers, 1) == worker]


def xdist_worker() -> tuple[int, int]:
    """(this worker's index, how many workers) under pytest-xdist; (0, 1) without it."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if name.startswith("gw") and name[2:].isdigit() and count.isdigit() and int(count) > 0:
        return int(name[2:]) % int(count), int(count)
    return 0, 1


RUN = RunPrefix.from_env()

# A leased port is not handed out again for this long, by any worker of the run: long enough
# for the test that asked to bind it, short enough that the block of 80 never runs dry.
LEASE_S = 20.0


def lease_file(run: RunPrefix) -> str:
    # Not under $TMPDIR: each worker's session has its own (tests/conftest.py).
    return f"/tmp/distdoctor-test-ports-{run.value}.json"


def _bindable(address: str, port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((address, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
        return True


def free_port(address: str = "", run: RunPrefix | None = None, leases_at: str | None = None) -> int:
    """A port of this run's block that nothing on this machine holds now and that no process of
    the run (another xdist worker, or this one) was handed in the last LEASE_S seconds; tested
    without SO_REUSEADDR, so a port still in TIME_WAIT is passed over. The leases live in one
    file per run value under /tmp, read and written under an exclusive lock."""
    run = run or RUN
    ports = run.ports
    with open(leases_at or lease_file(run), "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            fh.seek(0)
            try:
                leases = {int(k): float(v) for k, v in json.loads(fh.read() or "{}").items()}
            except (ValueError, AttributeError):
                leases = {}
            now = time.time()
            # Oldest lease first: a port not handed out recently is the likeliest to be free.
            order = sorted(ports, key=lambda p: (leases.get(p, 0.0), (p - run.pid) % len(ports)))
            for port in order:
                if now - leases.get(port, 0.0) < LEASE_S or not _bindable(address, port):
                    continue
                leases[port] = now
                fh.seek(0)
                fh.truncate()
                fh.write(json.dumps({str(p): t for p, t in leases.items() if now - t < 3600}))
                fh.flush()
                return port
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
    raise PrefixError(f"every port of {ports.start}-{ports.stop - 1} ({VARIABLE}={run.value}) is in use "
                      f"or was handed out in the last {LEASE_S:.0f} s")
