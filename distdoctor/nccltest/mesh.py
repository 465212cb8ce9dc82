"""The mesh check: can every rank open a TCP connection to every other rank?

NCCL and gloo connect each pair of ranks on ports the kernel picks at random, so a firewall
that lets the rendezvous port through but drops other ports hangs them after a successful
rendezvous. Here each rank listens on an ephemeral port of the address it will use and every
rank connects to every other one, before any collective is tried. A connection counts only
when the peer answers the job's token with its own rank, so a stray service on a recycled
port, or another job, never passes for a peer.

A probe may also time a transfer (`nbytes` after the handshake, answered with `GOT <n>`): the
handshake is a few bytes, the transfer a mid-size message, so "small passes, large stalls"
(an MTU mismatch along the path) is told apart from "no connection", and a throttled host or
link shows as a low rate next to the others'.

The sockets live here rather than in distdoctor.host because this is a protocol between
ranks of one job, not a probe of the machine.
"""

from __future__ import annotations

import dataclasses
import errno
import hmac
import secrets
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from distdoctor import bounded
from distdoctor.nccltest import hostmesh

MAGIC = "DDNT1"
# Path MTU probe: a datagram with don't-fragment set, echoed by the peer's listener on the same
# port number over UDP. The echo is a few bytes, never larger than what came in.
_MTU_MAGIC = b"DDMTU1"
# Linux <netinet/in.h>: set DF on every datagram; the route's MTU as the kernel knows it.
_IP_MTU_DISCOVER, _IP_PMTUDISC_DO, _IP_MTU = 10, 2, 14
_IPV6_MTU_DISCOVER, _IPV6_PMTUDISC_DO, _IPV6_MTU = 23, 2, 24
# The MTUs a path is commonly built with: jumbo, InfiniBand/RoCE, Ethernet, PPPoE, tunnels, IPv6's minimum.
COMMON_MTUS = (9216, 9000, 8192, 4096, 4092, 1500, 1492, 1480, 1460, 1450, 1400, 1280)
# A peer may ask to send at most this much: a stranger cannot make a listener read forever.
MAX_TRANSFER = 64 << 20
_CHUNK = 64 << 10
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
        # rank -> the address its probe came from: a rank behind NAT advertises one address and
        # arrives from another (a container on a bridge network).
        self.seen: dict[int, str] = {}
        threading.Thread(target=self._accept_loop, daemon=True, name="nccl-test-mesh-listener").start()
        self.udp: socket.socket | None = socket.socket(family, socket.SOCK_DGRAM)
        try:
            self.udp.bind((address, self.port))
        except OSError:  # the UDP port of the same number is someone else's: no path MTU probes here
            self.udp.close()
            self.udp = None
        else:
            threading.Thread(target=self._echo_loop, daemon=True, name="nccl-test-mesh-mtu").start()

    def _echo_loop(self) -> None:
        udp = self.udp
        while udp is not None and not self._closed:
            try:
                data, peer = udp.recvfrom(65536)
            except OSError:
                return
            if data.startswith(_MTU_MAGIC) and len(data) >= len(_MTU_MAGIC) + 8:
                try:
                    udp.sendto(b"ACK" + data[len(_MTU_MAGIC):len(_MTU_MAGIC) + 8], peer)
                except OSError:
                    pass

    def set_token(self, token: str) -> None:
        self._token = token
        self._token_set.set()

    def close(self) -> None:
        self._closed = True
        for sock in (self.sock, self.udp):
            try:
                if sock is not None:
                    sock.close()
            except OSError:
                pass

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                conn, peer = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn, str(peer[0])), daemon=True).start()

    def _answer(self, conn: socket.socket, peer: str = "") -> None:
        with conn:
            try:
                conn.settimeout(10)
                line = _read_line(conn, 256).decode("ascii", "replace").split()
                # A peer may connect before rank 0's token reached this rank: wait for it.
                if len(line) in (3, 4) and line[0] == MAGIC and self._token_set.wait(10) and self._token \
                        and hmac.compare_digest(line[1].encode(), self._token.encode()):
                    conn.sendall(f"OK {self.rank}\n".encode())
                    if line[2].isdigit() and peer:
                        self.seen[int(line[2])] = peer.removeprefix("::ffff:")
                else:
                    conn.sendall(b"NO\n")
                    return
                size = int(line[3]) if len(line) == 4 and line[3].isdigit() else 0
                if 0 < size <= MAX_TRANSFER:
                    got = 0
                    while got < size:
                        chunk = conn.recv(min(_CHUNK, size - got))
                        if not chunk:
                            return
                        got += len(chunk)
                    conn.sendall(f"GOT {got}\n".encode())
            except (OSError, ValueError):
                pass


def _read_line(conn: socket.socket, limit: int) -> bytes:
    """One line, at most limit bytes: a peer sending garbage without a newline is cut off."""
    data = b""
    while b"\n" not in data and len(data) < limit:
        chunk = conn.recv(limit - len(data))
        if not chunk:
            break
        data += chunk
    return data.split(b"\n", 1)[0]


@dataclass(frozen=True)
class Probe:
    """One directed probe: status 'ok' or why not; rate_gbs of the timed transfer (0 without
    one); moved: bytes the peer confirmed, or the bytes sent before a transfer stalled."""

    status: str
    rate_gbs: float = 0.0
    seconds: float = 0.0
    moved: int = 0
    path: dict[str, Any] | None = None  # after a stall: path_mtu()'s answer

    def to_dict(self) -> dict[str, Any]:
        out = {"status": self.status, "rate_gbs": round(self.rate_gbs, 6), "seconds": round(self.seconds, 6),
               "moved": self.moved}
        if self.path is not None:
            out["path"] = self.path
        return out


def path_mtu(address: str, port: int, timeout: float = 0.3, tries: int = 2,
             sizes: Sequence[int] = COMMON_MTUS) -> dict[str, Any]:
    """The largest IP packet, of the route's MTU and the common sizes below it, that crosses the
    path to the peer's listener with don't-fragment set and is echoed: {"route_mtu": what this
    end sends, "passes": the largest size echoed (0: none), "fails": the sizes that were not}.
    A switch or bridge with a smaller MTU drops larger frames without a word (no ICMP), which is
    what stalls TCP after its handshake; a router's "fragmentation needed" makes the kernel refuse
    the larger sizes here (EMSGSIZE), which counts the same."""
    v6 = ":" in address
    overhead = 48 if v6 else 28  # IP and UDP headers
    out: dict[str, Any] = {"route_mtu": 0, "passes": 0, "fails": []}
    try:
        sock = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_DGRAM)
    except OSError:
        return out
    with sock:
        try:
            if v6:
                sock.setsockopt(socket.IPPROTO_IPV6, _IPV6_MTU_DISCOVER, _IPV6_PMTUDISC_DO)
            else:
                sock.setsockopt(socket.IPPROTO_IP, _IP_MTU_DISCOVER, _IP_PMTUDISC_DO)
            sock.connect((address, port))
            route = sock.getsockopt(socket.IPPROTO_IPV6 if v6 else socket.IPPROTO_IP, _IPV6_MTU if v6 else _IP_MTU)
        except OSError:
            return out
        route = min(route, 65535)  # lo's 65536 is more than one datagram
        out["route_mtu"] = route
        if not _echoed(sock, 576 - overhead, timeout, tries):
            out["no_echo"] = True  # nothing answers small datagrams either (UDP filtered): no verdict
            return out
        for size in sorted({s for s in sizes if s < route} | {route}, reverse=True):
            if size - overhead < len(_MTU_MAGIC) + 8:
                break
            if _echoed(sock, size - overhead, timeout, tries):
                out["passes"] = size
                break
            out["fails"].append(size)
    return out


def _echoed(sock: socket.socket, payload: int, timeout: float, tries: int) -> bool:
    nonce = secrets.token_bytes(8)
    datagram = _MTU_MAGIC + nonce + bytes(payload - len(_MTU_MAGIC) - 8)
    for _ in range(tries):
        try:
            sock.send(datagram)
        except OSError:  # EMSGSIZE: larger than the path MTU the kernel learned
            return False
        end = time.monotonic() + timeout
        while (left := end - time.monotonic()) > 0:
            sock.settimeout(left)
            try:
                if sock.recv(64) == b"ACK" + nonce:
                    return True
            except (socket.timeout, OSError):
                break
    return False


def probe(rank: int, address: str, port: int, token: str, my_rank: int, timeout: float) -> str:
    """'ok' or why not: timeout, refused, no route, no answer, rejected, wrong peer."""
    return probe_transfer(rank, address, port, token, my_rank, timeout, 0).status


def probe_transfer(rank: int, address: str, port: int, token: str, my_rank: int, timeout: float,
                   nbytes: int, transfer_timeout: float | None = None) -> Probe:
    """The handshake, then (nbytes > 0) a timed transfer of nbytes. A transfer that does not
    complete is 'stalled' with the bytes that left before it stopped: the handshake got through,
    so the path carries small packets but not full-size ones."""
    if not address or not port:
        return Probe("no address")
    start = time.monotonic()
    try:
        sock = socket.create_connection((address, port), timeout=timeout)
    except socket.timeout:
        return Probe("timeout")
    except OSError as exc:
        return Probe(_ERRNO_NAMES.get(exc.errno, exc.strerror or "error"))
    with sock:
        try:
            sock.settimeout(max(0.2, timeout - (time.monotonic() - start)))
            sock.sendall(f"{MAGIC} {token} {my_rank}{f' {nbytes}' if nbytes > 0 else ''}\n".encode())
            reply = _read_line(sock, 64).decode("ascii", "replace").split()
        except socket.timeout:
            return Probe("no answer")
        except OSError as exc:
            return Probe(_ERRNO_NAMES.get(exc.errno, exc.strerror or "error"))
        if reply[:1] != ["OK"]:
            return Probe("rejected" if reply[:1] == ["NO"] else "no answer")
        if reply[1:2] != [str(rank)]:
            return Probe("wrong peer")
        if nbytes <= 0:
            return Probe("ok")
        return _transfer(sock, nbytes, transfer_timeout or timeout)


def _transfer(sock: socket.socket, nbytes: int, timeout: float) -> Probe:
    payload = memoryview(bytes(min(_CHUNK, nbytes)))
    sent = 0
    start = time.monotonic()
    end = start + timeout
    try:
        while sent < nbytes:
            sock.settimeout(max(0.05, end - time.monotonic()))
            sent += sock.send(payload[:min(len(payload), nbytes - sent)])
        sock.settimeout(max(0.05, end - time.monotonic()))
        reply = _read_line(sock, 64).decode("ascii", "replace").split()
    except socket.timeout:
        return Probe("stalled", 0.0, time.monotonic() - start, sent)
    except OSError as exc:
        return Probe("stalled" if sent else _ERRNO_NAMES.get(exc.errno, exc.strerror or "error"), 0.0,
                     time.monotonic() - start, sent)
    seconds = max(1e-9, time.monotonic() - start)
    if reply[:2] != ["GOT", str(nbytes)]:
        return Probe("stalled", 0.0, seconds, sent)
    return Probe("ok", nbytes / seconds / 1e9, seconds, nbytes)


def probe_seconds(peers: int, timeout: float, parallel: int = 64) -> float:
    """The most probe_all can take for this many peers."""
    rounds = -(-peers // parallel) if peers > 0 else 0
    return rounds * (timeout + 0.2) + 0.5


def probe_all(peers: Mapping[int, tuple[str, int]], token: str, my_rank: int, timeout: float,
              parallel: int = 64) -> dict[int, str]:
    """Connect to every peer, `parallel` at a time (a 1000-rank job must not open 1000 sockets
    per rank at once); a peer not probed by the end of the time budget counts as 'timeout'."""
    others = [r for r in peers if r != my_rank]
    answers = bounded.map(lambda rank: probe(rank, *peers[rank], token, my_rank, timeout), others,
                          probe_seconds(len(others), timeout, parallel), workers=parallel, name="mesh-probe")
    return {r: "timeout" if isinstance(a, bounded.TimedOut) else a for r, a in zip(others, answers)}


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


def probe_hosts(peers: Mapping[int, tuple[str, int]], token: str, my_rank: int, timeout: float, nbytes: int,
                budget: float, parallel: int = 64) -> dict[int, Probe]:
    """A host leader's probes: handshakes with every peer leader at once (bounded), then one timed
    transfer at a time, in the given order, to those that answered, until the budget (seconds)
    is spent. One at a time so that the rates measure the link, not this host's own contention;
    the order (see hostmesh.targets) keeps two senders off one receiver. A target far slower
    than the row's fastest is measured twice (the faster try counts)."""
    end = time.monotonic() + budget
    order = list(peers)
    statuses = probe_all(peers, token, my_rank, timeout, parallel)
    out = {r: Probe(statuses[r]) for r in order}
    if nbytes <= 0:
        return out
    for rank in order:
        left = end - time.monotonic()
        if statuses[rank] != "ok" or left < timeout:
            continue  # not timed: 'ok' without a rate, never a false stall cut short by the budget
        address, port = peers[rank]
        out[rank] = probe_transfer(rank, address, port, token, my_rank, timeout, nbytes)
        if out[rank].status == "stalled":
            # Small packets pass and large ones do not: measure what the path carries.
            out[rank] = dataclasses.replace(out[rank], path=path_mtu(address, port))
    # One transfer that a busy host's scheduler held up for 40 ms reads as a slow link: a target
    # far below this row's fastest is measured once more, and the faster try counts. A slow
    # link or host is slow on both tries; a slow sender is slow to every target (no retry).
    timed = [r for r in order if out[r].status == "ok" and out[r].moved]
    best = max((hostmesh.judged_rate(out[r].to_dict()) for r in timed), default=0.0)
    for rank in timed:
        if hostmesh.judged_rate(out[rank].to_dict()) >= hostmesh.SLOW_FACTOR * best or end - time.monotonic() < timeout:
            continue
        address, port = peers[rank]
        again = probe_transfer(rank, address, port, token, my_rank, timeout, nbytes)
        if again.status == "ok" and again.rate_gbs > out[rank].rate_gbs:
            out[rank] = again
    return out


def probe_row(mine: Mapping[str, Any], plan: Mapping[str, Any], rank: int) -> dict[int, dict[str, Any]]:
    """A host leader's probes of the targets rank 0 gave it: {leader rank: Probe as a dict}."""
    peers = {int(r): (str(addr), int(port)) for r, addr, port in mine.get("targets", [])}
    row = probe_hosts(peers, plan["token"], rank, plan["probe_timeout"], int(plan.get("nbytes", 0)),
                      float(plan.get("budget", 5.0)))
    return {r: p.to_dict() for r, p in row.items()}
