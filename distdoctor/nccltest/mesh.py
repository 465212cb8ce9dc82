"""The mesh check: can every rank open a TCP connection to every other rank?

NCCL and gloo connect each pair of ranks on ports the kernel picks at random, so a firewall
that lets the rendezvous port through but drops other ports hangs them after a successful
rendezvous. Here each rank listens on an ephemeral port of the address it will use and every
rank connects to every other one, before any collective is tried. A connection counts only
when the peer answers the job's token with its own rank, so a stray service on a recycled
port, or another job, never passes for a peer.

The sockets live here rather than in distdoctor.host because this is a protocol between
ranks of one job, not a probe of the machine.
"""

from __future__ import annotations

import errno
import hmac
import queue
import socket
import threading
import time
from typing import Any, Mapping, Sequence

MAGIC = "DDNT1"
_ERRNO_NAMES = {errno.ECONNREFUSED: "refused", errno.ETIMEDOUT: "timeout", errno.EHOSTUNREACH: "no route",
                errno.ENETUNREACH: "unreachable", errno.ECONNRESET: "reset", errno.EACCES: "denied",
                errno.EPERM: "denied"}


class Listener:
    """Accepts peers of this job on an ephemeral port; answers `OK <rank>` to the right token."""

    def __init__(self, address: str, rank: int, backlog: int = 256):
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        self.rank = rank
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((address, 0))
        self.sock.listen(backlog)
        self.port: int = self.sock.getsockname()[1]
        self._token: str | None = None
        self._token_set = threading.Event()
        self._closed = False
        threading.Thread(target=self._accept_loop, daemon=True, name="nccl-test-mesh-listener").start()

    def set_token(self, token: str) -> None:
        self._token = token
        self._token_set.set()

    def close(self) -> None:
        self._closed = True
        try:
            self.sock.close()
        except OSError:
            pass

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                conn, _peer = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.settimeout(10)
                line = conn.recv(256).decode("ascii", "replace").split()
                # A peer may connect before rank 0's token reached this rank: wait for it.
                if len(line) == 3 and line[0] == MAGIC and self._token_set.wait(10) and self._token \
                        and hmac.compare_digest(line[1], self._token):
                    conn.sendall(f"OK {self.rank}\n".encode())
                else:
                    conn.sendall(b"NO\n")
            except OSError:
                pass


def probe(rank: int, address: str, port: int, token: str, my_rank: int, timeout: float) -> str:
    """'ok' or why not: timeout, refused, no route, no answer, rejected, wrong peer."""
    if not address or not port:
        return "no address"
    start = time.monotonic()
    try:
        sock = socket.create_connection((address, port), timeout=timeout)
    except socket.timeout:
        return "timeout"
    except OSError as exc:
        return _ERRNO_NAMES.get(exc.errno, exc.strerror or "error")
    with sock:
        try:
            sock.settimeout(max(0.2, timeout - (time.monotonic() - start)))
            sock.sendall(f"{MAGIC} {token} {my_rank}\n".encode())
            reply = sock.recv(64).decode("ascii", "replace").split()
        except socket.timeout:
            return "no answer"
        except OSError as exc:
            return _ERRNO_NAMES.get(exc.errno, exc.strerror or "error")
    if reply[:1] == ["OK"]:
        return "ok" if reply[1:2] == [str(rank)] else "wrong peer"
    return "rejected" if reply[:1] == ["NO"] else "no answer"


def probe_seconds(peers: int, timeout: float, parallel: int = 64) -> float:
    """The most probe_all can take for this many peers."""
    rounds = -(-peers // parallel) if peers > 0 else 0
    return rounds * (timeout + 0.2) + 0.5


def probe_all(peers: Mapping[int, tuple[str, int]], token: str, my_rank: int, timeout: float,
              parallel: int = 64) -> dict[int, str]:
    """Connect to every peer, `parallel` at a time (a 1000-rank job must not open 1000 sockets
    per rank at once); a peer not probed by the end of the time budget counts as 'timeout'."""
    todo = queue.SimpleQueue()
    others = [r for r in peers if r != my_rank]
    for rank in others:
        todo.put(rank)
    results: dict[int, str] = {}

    def work() -> None:
        while True:
            try:
                rank = todo.get_nowait()
            except queue.Empty:
                return
            address, port = peers[rank]
            results[rank] = probe(rank, address, port, token, my_rank, timeout)

    workers = [threading.Thread(target=work, daemon=True) for _ in range(min(parallel, len(others)))]
    for worker in workers:
        worker.start()
    end = time.monotonic() + probe_seconds(len(others), timeout, parallel)
    for worker in workers:
        worker.join(max(0.0, end - time.monotonic()))
    return {r: results.get(r, "timeout") for r in others}


def blocked_pairs(rows: Mapping[int, Mapping[int, str]]) -> list[tuple[int, int, str]]:
    return sorted((src, dst, status) for src, row in rows.items() for dst, status in row.items() if status != "ok")


def matrix_table(rows: Mapping[int, Mapping[int, str]], world_size: int,
                 hosts: Mapping[int, str] | None = None) -> dict[str, Any]:
    """N x N table, rows = connecting rank, columns = listening rank."""
    hosts = hosts or {}
    columns = ["from \\ to"] + [str(r) for r in range(world_size)]
    table_rows: list[list[str]] = []
    for src in range(world_size):
        row = rows.get(src)
        label = f"{src} {hosts.get(src, '')}".strip()
        cells = ["-" if dst == src else ("?" if row is None else row.get(dst, "?")) for dst in range(world_size)]
        table_rows.append([label] + cells)
    return {"columns": columns, "rows": table_rows}


def summarize_blocked(pairs: Sequence[tuple[int, int, str]], hosts: Mapping[int, str], limit: int = 8) -> str:
    shown = [f"{s}({hosts.get(s, '?')})->{d}({hosts.get(d, '?')}): {st}" for s, d, st in pairs[:limit]]
    more = f" and {len(pairs) - limit} more" if len(pairs) > limit else ""
    return "; ".join(shown) + more


def firewall_fix(pairs: Sequence[tuple[int, int, str]], hosts: Mapping[int, str],
                 addresses: Mapping[int, str]) -> str:
    """One nft line per listening host whose connections fail: the rule goes on that node, and
    is inserted at the top of its input chain (`nft add rule` would append it after the drop
    rule that causes the failure, and change nothing)."""
    sources: dict[str, list[str]] = {}
    for src, dst, _status in pairs:
        address = addresses.get(src) or ""
        if address and hosts.get(dst):
            found = sources.setdefault(hosts[dst], [])
            if address not in found:
                found.append(address)
    lines = []
    for host, addrs in sorted(sources.items()):
        family = "ip6" if any(":" in a for a in addrs) else "ip"
        match = addrs[0] if len(addrs) == 1 else "{ " + ", ".join(addrs) + " }"
        lines.append(f"ssh {host} nft insert rule inet filter input {family} saddr {match} accept")
    return "\n".join(lines)
