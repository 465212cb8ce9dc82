"""Benchmark: reach.hosts against many hosts of which half never answer.

Each target is its own loopback address (127.83.x.y; all of 127/8 is local on Linux) with a
listener on one port. Half the listeners accept and hang up at once (ssh then reports
"connection closed"); the other half listen with a full backlog and never accept, so every
connect to them times out, like a host behind a DROP rule (FINDINGS.md section 7). Each
target gets the whole probe set: name, TCP to the ssh port, and a real `ssh -o BatchMode=yes
-o ConnectTimeout=1 ... true`. The per-probe timeout is 1 s.

Goal: 64 targets in under 2 s, and 256 targets still bounded by the timeout (not 4x).
The runs of the two sizes alternate; the medians and their ratio are printed, with what a
one-host-after-another probe would cost (the dead hosts alone: count x timeout).

    python bench/reach_scale.py [--repeat 5] [--sizes 64,256]
"""

from __future__ import annotations

import argparse
import os
import selectors
import socket
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from distdoctor.checks import reach  # noqa: E402
from distdoctor.host import Host  # noqa: E402
from distdoctor.model import Status  # noqa: E402
from distdoctor.testing import run_check  # noqa: E402

TIMEOUT = 1.0


def address(i: int) -> str:
    return f"127.83.{i // 250}.{i % 250 + 1}"


class Targets:
    """n listeners on address(i):port; even i answer (accept, close), odd i never accept."""

    def __init__(self, n: int, port: int):
        self.sockets: list[socket.socket] = []
        self.selector = selectors.DefaultSelector()
        self.stop = threading.Event()
        for i in range(n):
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((address(i), port))
            if i % 2 == 0:
                sock.listen(128)
                sock.setblocking(False)
                self.selector.register(sock, selectors.EVENT_READ)
            else:
                sock.listen(0)
                for _ in range(2):  # fill the accept queue: later SYNs are dropped
                    filler = socket.socket()
                    filler.setblocking(False)
                    filler.connect_ex((address(i), port))
                    self.sockets.append(filler)
            self.sockets.append(sock)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            for key, _ in self.selector.select(0.1):
                try:
                    conn, _ = key.fileobj.accept()
                    conn.close()
                except OSError:
                    pass

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        for sock in self.sockets:
            sock.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.83.0.1", 0))
        return sock.getsockname()[1]


def one_run(n: int, port: int, ssh_config: str | None) -> tuple[float, dict[str, int]]:
    """ssh_config None: the port is given (ssh_port); else the port comes from that ssh config
    file, which costs an `ssh -G` per host."""
    params = {"hosts": [address(i) for i in range(n)], "probe_timeout": TIMEOUT,
              "ssh_port": 0 if ssh_config else port,
              "ssh_options": ["-F", ssh_config or "/dev/null", "-o", "IdentityAgent=none"], "max_rows": 5}
    started = time.monotonic()
    findings = run_check(reach.hosts, Host(), params)
    wall = time.monotonic() - started
    matrix = next(f for f in findings if "hosts" in f.evidence and "table" in f.evidence)
    if matrix.status is Status.OK:
        raise SystemExit("benchmark broken: every host answered")
    counts: dict[str, int] = {}
    for host in matrix.evidence["hosts"]:
        for probe, result in host["probes"].items():
            key = f"{probe}={result['status']}"
            counts[key] = counts.get(key, 0) + 1
    return wall, counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--sizes", default="64,256")
    parser.add_argument("--ssh-config", action="store_true",
                        help="take the port from an ssh config file (Port under Host 127.83.*) instead of "
                             "ssh_port: adds one `ssh -G` process per host")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    port = free_port()
    targets = Targets(max(sizes), port)
    ssh_config = None
    if args.ssh_config:
        import tempfile

        fd, ssh_config = tempfile.mkstemp(prefix="ddr-bench-", suffix=".ssh_config")
        with os.fdopen(fd, "w") as fh:
            fh.write(f"Host 127.83.*\n  Port {port}\n")
    walls: dict[int, list[float]] = {n: [] for n in sizes}
    try:
        for _ in range(args.repeat):
            for n in sizes:  # alternate the sizes so drift hits both alike
                wall, counts = one_run(n, port, ssh_config)
                walls[n].append(wall)
                print(f"  {n:4d} targets: {wall:5.2f} s   {counts}", file=sys.stderr)
    finally:
        targets.close()
        if ssh_config:
            os.unlink(ssh_config)
    how = "port from an ssh config (ssh -G per host)" if ssh_config else "ssh_port given"
    print(f"reach.hosts, per-probe timeout {TIMEOUT:g} s, half the targets never answer "
          f"(probes: name, tcp/ssh, ssh; {how}), {args.repeat} runs each, {os.cpu_count()} CPUs")
    medians = {n: statistics.median(w) for n, w in walls.items()}
    for n in sizes:
        serial = (n // 2) * TIMEOUT * 2  # one after another: tcp and ssh each wait out the timeout
        print(f"  {n:4d} targets: median {medians[n]:.2f} s (min {min(walls[n]):.2f}, max {max(walls[n]):.2f});"
              f" one host after another would take >= {serial:.0f} s ({serial / medians[n]:.0f}x)")
    if len(sizes) >= 2:
        small, large = sizes[0], sizes[-1]
        print(f"  growth {small} -> {large} targets ({large / small:.0f}x the hosts): "
              f"median ratio {medians[large] / medians[small]:.2f}")
        print(f"  goal: {small} targets under 2 s: {'met' if medians[small] < 2 else 'NOT met'}; "
              f"{large} targets bounded by the timeout (ratio well under {large / small:.0f}): "
              f"{'met' if medians[large] / medians[small] < 2 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
