"""Rank 0's rendezvous store: a small key-value server with a bound on everything a peer can
make it hold, and a name for every peer that is not this job's.

Why not torch's TCPStore: its server keeps whatever any peer appends (one unauthenticated
`append` of 1 GiB pushed rank 0 from 0.24 to 3.4 GB) and cannot tell this job's ranks from a
stranger. Here a connection must prove the job's token before its first request
(store_wire.py); until then at most HELLO_MAX bytes are read from it and it gets `hello_s` to
send them (a slow writer is cut off and named). Authenticated connections are bounded too:
a value, the sum of all values, the number of keys and of connections, and the time a frame
may take to arrive. A write past a bound is refused (the writer's call fails), never stored.

Why one store for everything rather than TCPStore for gloo's keys beside a bounded channel
for distdoctor's: a stranger can append to any key of a TCPStore, gloo's or not, so keeping
one keeps the hole. torch reaches this server through store_torch.BoundedStore, a Python
subclass of torch.distributed.Store: init_process_group(store=...) with gloo calls only set,
get and wait on it (torch 2.13). Measured with bench/store_bench.py (2 shared cores, load
4.7-7.7): gloo init and one all_reduce of 4 ranks take a median 1.05-1.22x TCPStore's (about
50 ms against 53-62 ms), and a stranger's 1 GiB append grows TCPStore's server from 220 MiB
to 1263 MiB and this one not at all (refused at the hello). One thread serves every
connection with selectors, so a thousand ranks cost a thousand sockets, not a thousand threads.
"""

from __future__ import annotations

import hmac
import secrets
import selectors
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from distdoctor.nccltest import store_wire as wire

MIB = 1 << 20
TICK_S = 0.2  # how often the deadlines (hellos, frames, waits) are looked at


@dataclass(frozen=True)
class Limits:
    value_bytes: int = 16 * MIB  # one key's value (the roll grows by one fingerprint per rank)
    total_bytes: int = 64 * MIB  # every value together
    keys: int = 4096
    connections: int = 256  # authenticated
    pending: int = 64  # connections that have not proved the token yet
    hello_s: float = 10.0  # to send the hello after connecting
    frame_s: float = 30.0  # for a request's frame, once its first byte came
    strangers: int = 64  # named one by one; the rest are counted

    @classmethod
    def for_world(cls, world: int) -> "Limits":
        """A rank holds three connections (its phases, the monitor, gloo's through the first) and
        writes a few dozen keys of at most a few KiB (its fingerprint, results, gloo's address)."""
        world = max(1, world)
        return cls(total_bytes=64 * MIB + world * 256 * 1024, keys=4096 + 64 * world,
                   connections=64 + 4 * world)


@dataclass
class Stranger:
    peer: str
    why: str
    claims: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Conn:
    sock: socket.socket
    peer: str
    nonce: bytes
    opened: float
    inbuf: bytearray = field(default_factory=bytearray)
    outbuf: bytearray = field(default_factory=bytearray)
    authed: bool = False
    claims: dict[str, Any] = field(default_factory=dict)
    frame_started: float = 0.0
    waiting: tuple[list[bytes], float, bytes] | None = None  # keys, deadline, the key to return (GET)


class Server:
    """Serves the store on a listening socket until close(). `strangers` names every peer that
    did not prove the token (the first `limits.strangers`; `more_strangers` counts the rest)."""

    def __init__(self, listener: socket.socket, token: str, limits: Limits | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.listener = listener
        self.token = token
        self.limits = limits or Limits()
        self.clock = clock
        self.data: dict[bytes, bytes] = {}
        self.total = 0
        self.peak_total = 0
        self.strangers: list[Stranger] = []
        self.more_strangers = 0
        self.lock = threading.Lock()  # guards strangers for readers on other threads
        self._conns: dict[int, _Conn] = {}
        self._waiters: dict[bytes, set[int]] = {}
        self._ready: set[int] = set()
        self._sel = selectors.DefaultSelector()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None

    # --- life ------------------------------------------------------------------------------

    def start(self) -> "Server":
        self.listener.setblocking(False)
        self._sel.register(self.listener, selectors.EVENT_READ, None)
        self._thread = threading.Thread(target=self._serve, daemon=True, name="nccl-test-store")
        self._thread.start()
        return self

    def close(self) -> None:
        self._closed.set()
        if self._thread is not None:
            self._thread.join(timeout=2)

    def named(self) -> tuple[list[Stranger], int]:
        with self.lock:
            return list(self.strangers), self.more_strangers

    def _name(self, conn: _Conn, why: str) -> None:
        with self.lock:
            if len(self.strangers) < self.limits.strangers:
                self.strangers.append(Stranger(conn.peer, why, dict(conn.claims)))
            else:
                self.more_strangers += 1

    def _serve(self) -> None:
        try:
            while not self._closed.is_set():
                for key, events in self._sel.select(timeout=TICK_S):
                    if key.data is None:
                        self._accept()
                        continue
                    conn = self._conns.get(key.fd)
                    if conn is None:
                        continue
                    if events & selectors.EVENT_WRITE:
                        self._flush(conn)
                    if events & selectors.EVENT_READ and key.fd in self._conns:
                        self._receive(conn)
                self._timers()
                while self._ready:
                    conn = self._conns.get(self._ready.pop())
                    if conn is not None:
                        self._process(conn)
        finally:
            for conn in list(self._conns.values()):
                self._drop(conn)
            self._sel.close()
            try:
                self.listener.close()
            except OSError:
                pass

    # --- connections -----------------------------------------------------------------------

    def _accept(self) -> None:
        for _ in range(64):  # a burst of connections is taken in one pass
            try:
                sock, addr = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # EMFILE and friends: the connection waits in the backlog
                return
            sock.setblocking(False)
            peer = f"{addr[0]}:{addr[1]}" if isinstance(addr, tuple) else str(addr)
            conn = _Conn(sock, peer, secrets.token_bytes(wire.NONCE_BYTES), self.clock())
            waiting = [c for c in self._conns.values() if not c.authed]
            if len(self._conns) - len(waiting) >= self.limits.connections:
                self._name(conn, f"turned away: {self.limits.connections} connections are open already")
                sock.close()
                continue
            if len(waiting) >= self.limits.pending:
                # The oldest goes, not the newest: a rank proves the token within milliseconds of
                # connecting, so a flood of idle connections cannot keep it out.
                oldest = min(waiting, key=lambda c: c.opened)
                self._name(oldest, f"cut off: one of {len(waiting)} connections that had not proved the token "
                                   "when more came (a flood of connections)")
                self._drop(oldest)
            self._conns[sock.fileno()] = conn
            self._sel.register(sock, selectors.EVENT_READ, conn)
            conn.outbuf += wire.MAGIC + conn.nonce
            self._flush(conn)

    def _drop(self, conn: _Conn) -> None:
        fd = conn.sock.fileno()
        self._conns.pop(fd, None)
        if conn.waiting:
            for key in conn.waiting[0]:
                self._waiters.get(key, set()).discard(fd)
        try:
            self._sel.unregister(conn.sock)
        except (KeyError, ValueError, OSError):
            pass
        try:
            conn.sock.close()
        except OSError:
            pass

    def _flush(self, conn: _Conn) -> None:
        if conn.outbuf:
            try:
                sent = conn.sock.send(conn.outbuf)
                del conn.outbuf[:sent]
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                self._drop(conn)
                return
        want = selectors.EVENT_READ | (selectors.EVENT_WRITE if conn.outbuf else 0)
        try:
            self._sel.modify(conn.sock, want, conn)
        except (KeyError, ValueError, OSError):
            pass
        if not conn.outbuf and conn.waiting is None and conn.inbuf:
            self._ready.add(conn.sock.fileno())  # requests that came while a reply was pending

    def _receive(self, conn: _Conn) -> None:
        room = (wire.LENGTH.size + wire.HELLO_MAX if not conn.authed else
                wire.LENGTH.size + self.limits.value_bytes + 65536) - len(conn.inbuf)
        try:
            chunk = conn.sock.recv(max(1, min(1 << 20, room)))
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:
            if not conn.authed and (conn.inbuf or conn.claims):
                self._name(conn, f"closed after {len(conn.inbuf)} bytes that are not a distdoctor hello")
            # a connection that sends nothing and closes is a port probe (a rank's wait_for_port)
            self._drop(conn)
            return
        if room <= 0:
            self._name(conn, "sent more than a request may hold" if conn.authed else
                       f"sent more than {wire.HELLO_MAX} bytes without proving the job's token")
            self._drop(conn)
            return
        if not conn.inbuf:
            conn.frame_started = self.clock()
        conn.inbuf += chunk
        if not conn.outbuf and conn.waiting is None:
            self._process(conn)

    def _process(self, conn: _Conn) -> None:
        """Handles the complete frames in conn.inbuf, one at a time, while no reply is pending."""
        while conn.sock.fileno() in self._conns and conn.waiting is None and not conn.outbuf:
            if len(conn.inbuf) < wire.LENGTH.size:
                return
            (size,) = wire.LENGTH.unpack_from(conn.inbuf)
            bound = wire.HELLO_MAX if not conn.authed else self.limits.value_bytes + 65536
            if size > bound:
                self._name(conn, f"announced a {size}-byte frame, over the {bound}-byte bound"
                           + ("" if conn.authed else " for a hello (not a distdoctor rank)"))
                self._drop(conn)
                return
            if len(conn.inbuf) < wire.LENGTH.size + size:
                return
            body = bytes(conn.inbuf[wire.LENGTH.size:wire.LENGTH.size + size])
            del conn.inbuf[:wire.LENGTH.size + size]
            conn.frame_started = self.clock() if conn.inbuf else 0.0
            if not conn.authed:
                self._hello(conn, body)
            else:
                self._request(conn, body)
            self._flush(conn)
        self._ready.discard(conn.sock.fileno())

    def _hello(self, conn: _Conn, body: bytes) -> None:
        given, claims = body[:wire.MAC_BYTES], body[wire.MAC_BYTES:]
        conn.claims = wire.claims_of(claims)
        if len(given) == wire.MAC_BYTES and hmac.compare_digest(given, wire.mac(self.token, b"client", conn.nonce, claims)):
            conn.authed = True
            conn.outbuf += wire.pack_reply(wire.OK, 0, wire.mac(self.token, b"server", conn.nonce, claims))
            return
        why = ("sealed with another job's token (a second job on this port, or a stranger)" if conn.claims
               else "sent bytes that are not a distdoctor hello")
        self._name(conn, why)
        conn.outbuf += wire.pack_reply(wire.REFUSED, 0, b"not this job's token")
        try:  # the refusal is tiny: one send, then the connection is gone
            conn.sock.send(conn.outbuf)
        except OSError:
            pass
        self._drop(conn)

    # --- requests ----------------------------------------------------------------------------

    def _request(self, conn: _Conn, body: bytes) -> None:
        try:
            op, number, keys, value = wire.unpack_request(body)
        except ValueError as exc:
            conn.outbuf += wire.pack_reply(wire.BAD, 0, str(exc).encode())
            return
        if op in (wire.GET, wire.WAIT):
            deadline = self.clock() + max(0, min(number, 24 * 3600 * 1000)) / 1000
            want = keys[:1] if op == wire.GET else keys
            conn.waiting = (want, deadline, keys[0] if op == wire.GET and keys else b"")
            for key in want:
                self._waiters.setdefault(key, set()).add(conn.sock.fileno())
            self._answer_waiter(conn, expired=False)
            return
        if not keys and op not in (wire.NUM_KEYS,):
            conn.outbuf += wire.pack_reply(wire.BAD, 0, b"no key")
            return
        key = keys[0] if keys else b""
        if op == wire.SET:
            conn.outbuf += self._store(key, value)
        elif op == wire.APPEND:
            conn.outbuf += self._store(key, self.data.get(key, b"") + value, len(value))
        elif op == wire.ADD:
            try:
                current = int(self.data.get(key, b"0"))
            except ValueError:
                current = 0
            total = current + number
            reply = self._store(key, str(total).encode())
            conn.outbuf += wire.pack_reply(wire.OK, total) if reply.endswith(wire.REPLY.pack(wire.OK, 0)) else reply
        elif op == wire.CHECK:
            conn.outbuf += wire.pack_reply(wire.OK, int(all(k in self.data for k in keys)))
        elif op == wire.DELETE:
            old = self.data.pop(key, None)
            self.total -= len(old) if old is not None else 0
            conn.outbuf += wire.pack_reply(wire.OK, int(old is not None))
        elif op == wire.NUM_KEYS:
            conn.outbuf += wire.pack_reply(wire.OK, len(self.data))
        elif op == wire.CAS:
            conn.outbuf += self._compare_set(key, value)
        else:
            conn.outbuf += wire.pack_reply(wire.BAD, 0, b"unknown request")

    def _store(self, key: bytes, value: bytes, grows: int | None = None) -> bytes:
        old = self.data.get(key)
        delta = len(value) - (len(old) if old is not None else 0)
        if len(value) > self.limits.value_bytes:
            return wire.pack_reply(wire.FULL, 0, f"a value of {len(value)} bytes is over the "
                                   f"{self.limits.value_bytes}-byte bound".encode())
        if self.total + delta > self.limits.total_bytes:
            return wire.pack_reply(wire.FULL, 0, f"the store would hold more than {self.limits.total_bytes} "
                                   "bytes".encode())
        if old is None and len(self.data) >= self.limits.keys:
            return wire.pack_reply(wire.FULL, 0, f"the store holds {self.limits.keys} keys already".encode())
        self.data[key] = value
        self.total += delta
        self.peak_total = max(self.peak_total, self.total)
        self._wake(key)
        return wire.pack_reply(wire.OK, 0)

    def _compare_set(self, key: bytes, value: bytes) -> bytes:
        if len(value) < 4:
            return wire.pack_reply(wire.BAD, 0, b"short compare_set")
        size = int.from_bytes(value[:4], "big")
        expected, desired = value[4:4 + size], value[4 + size:]
        current = self.data.get(key)
        if (current is None and not expected) or current == expected:
            reply = self._store(key, desired)
            if not reply.endswith(wire.REPLY.pack(wire.OK, 0)):
                return reply
            return wire.pack_reply(wire.OK, 0, desired)
        return wire.pack_reply(wire.OK, 0, current if current is not None else expected)

    def _wake(self, key: bytes) -> None:
        for fd in list(self._waiters.get(key, ())):
            conn = self._conns.get(fd)
            if conn is not None and conn.waiting is not None:
                self._answer_waiter(conn, expired=False)
                self._flush(conn)

    def _answer_waiter(self, conn: _Conn, expired: bool) -> None:
        assert conn.waiting is not None
        keys, _deadline, get_key = conn.waiting
        ready = all(k in self.data for k in keys)
        if not ready and not expired:
            return
        fd = conn.sock.fileno()
        for key in keys:
            self._waiters.get(key, set()).discard(fd)
            if not self._waiters.get(key, True):
                del self._waiters[key]
        conn.waiting = None
        if not ready:
            conn.outbuf += wire.pack_reply(wire.MISSING)
        else:
            conn.outbuf += wire.pack_reply(wire.OK, 0, self.data[get_key] if get_key else b"")

    def _timers(self) -> None:
        now = self.clock()
        for conn in list(self._conns.values()):
            if not conn.authed and now - conn.opened > self.limits.hello_s:
                self._name(conn, f"held a connection {self.limits.hello_s:g} s without proving the job's token "
                                 f"({len(conn.inbuf)} bytes sent: a slow writer)")
                self._drop(conn)
            elif conn.authed and conn.inbuf and conn.frame_started and now - conn.frame_started > self.limits.frame_s:
                self._name(conn, f"left a request unfinished for {self.limits.frame_s:g} s")
                self._drop(conn)
            elif conn.waiting is not None and now >= conn.waiting[1]:
                self._answer_waiter(conn, expired=True)
                self._flush(conn)

