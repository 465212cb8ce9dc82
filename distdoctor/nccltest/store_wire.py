"""The wire of distdoctor's rendezvous store (store_server.py serves it, store_torch.py hands it
to torch): frames, the handshake that proves the job's token, and one client connection.

A connection starts with the server's greeting, MAGIC and a random nonce. The client answers
with one frame: an HMAC of the job's token over the nonce and its claims (host, pid, rank,
world size, as JSON), then the claims. The server answers with its own HMAC over the same
nonce and claims, so each side knows the other holds the token before any key is read or
written: a stranger's bytes never reach the key space, and a rank that reached another job's
rank 0 learns so at once. After that each request is one frame and gets one reply, in order:

    request  op (1 byte) | number (int64: an amount, a wait in ms) | keys (u16 count, u16 len each) | value
    reply    status (1 byte) | number (int64) | value

Every length on the wire is bounded before it is read (store_server.Limits).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import struct
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from distdoctor.nccltest.store import Unsealed

MAGIC = b"DDSTORE1"
NONCE_BYTES = 16
GREETING = len(MAGIC) + NONCE_BYTES
HELLO_MAX = 4096  # a hello frame's body: a MAC and a few claims
MAC_BYTES = 32
CLAIMS = ("host", "pid", "rank", "world_size")

LENGTH = struct.Struct("!I")
REQUEST = struct.Struct("!cq")
REPLY = struct.Struct("!Bq")
U16 = struct.Struct("!H")

# requests
SET, GET, ADD, APPEND, CHECK, WAIT, DELETE, NUM_KEYS, CAS = (bytes([c]) for c in b"SGAPCWDNX")
# replies
OK, MISSING, REFUSED, FULL, BAD = range(5)


class StoreGone(ConnectionError):
    """The store went away, or did not answer within the bound."""


class NotThisJob(Unsealed):
    """The other end of the connection does not hold this job's token."""


class Full(ValueError):
    """The store refused a write over one of its bounds."""


def mac(token: str, side: bytes, nonce: bytes, claims: bytes) -> bytes:
    return hmac.new(token.encode(), side + b"\0" + nonce + claims, hashlib.sha256).digest()


def frame(body: bytes) -> bytes:
    return LENGTH.pack(len(body)) + body


def pack_request(op: bytes, keys: Sequence[bytes], number: int = 0, value: bytes = b"") -> bytes:
    parts = [REQUEST.pack(op, number), U16.pack(len(keys))]
    for key in keys:
        parts += [U16.pack(len(key)), key]
    parts.append(value)
    return frame(b"".join(parts))


def unpack_request(body: bytes) -> tuple[bytes, int, list[bytes], bytes]:
    """(op, number, keys, value); ValueError on a malformed body."""
    if len(body) < REQUEST.size + U16.size:
        raise ValueError("short request")
    op, number = REQUEST.unpack_from(body)
    (count,), pos = U16.unpack_from(body, REQUEST.size), REQUEST.size + U16.size
    keys = []
    for _ in range(count):
        if pos + U16.size > len(body):
            raise ValueError("truncated key list")
        (size,), pos = U16.unpack_from(body, pos), pos + U16.size
        if pos + size > len(body):
            raise ValueError("truncated key")
        keys.append(bytes(body[pos:pos + size]))
        pos += size
    return op, number, keys, bytes(body[pos:])


def pack_reply(status: int, number: int = 0, value: bytes = b"") -> bytes:
    return frame(REPLY.pack(status, number) + value)


def claims_of(raw: bytes) -> dict[str, Any]:
    """What a hello says about its sender, unverified: only the known fields, short values."""
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return {}
    if not isinstance(doc, dict):
        return {}
    return {k: (doc[k][:64] if isinstance(doc[k], str) else doc[k]) for k in CLAIMS
            if isinstance(doc.get(k), (str, int)) and not isinstance(doc.get(k), bool)}


class Connection:
    """One authenticated client connection. Calls are serialised: torch's threads and this
    rank's own phases may share it, and replies come back in order."""

    def __init__(self, addr: str, port: int, token: str, claims: Mapping[str, Any], timeout: float):
        self.addr, self.port, self.timeout = addr, port, timeout
        self.lock = threading.Lock()
        deadline = time.monotonic() + max(0.5, timeout)
        try:
            self.sock = socket.create_connection((addr, port), timeout=max(0.5, timeout))
        except OSError as exc:
            raise StoreGone(f"cannot connect to the rendezvous store at {addr}:{port}: {exc}") from None
        try:
            self._handshake(token, claims, deadline)
        except BaseException:
            self.sock.close()
            raise

    def _handshake(self, token: str, claims: Mapping[str, Any], deadline: float) -> None:
        greeting = self._read(GREETING, deadline)
        if greeting[:len(MAGIC)] != MAGIC:
            raise NotThisJob(f"{self.addr}:{self.port} is not a distdoctor rendezvous store (another program "
                             "listens there)")
        nonce = greeting[len(MAGIC):]
        body = json.dumps({k: claims[k] for k in CLAIMS if k in claims}, separators=(",", ":")).encode()
        self._send(frame(mac(token, b"client", nonce, body) + body), deadline)
        status, _number, value = self._reply(deadline, HELLO_MAX)
        if status == REFUSED:
            raise NotThisJob("the store refused this job's token: another job's rank 0 serves that port "
                             f"({value.decode('utf-8', 'replace')[:200]})")
        if status != OK or not hmac.compare_digest(value, mac(token, b"server", nonce, body)):
            raise NotThisJob("the store could not prove this job's token: another job's rank 0, or a stranger, "
                             "serves that port")

    def _send(self, data: bytes, deadline: float) -> None:
        try:
            self.sock.settimeout(max(0.05, deadline - time.monotonic()))
            self.sock.sendall(data)
        except OSError as exc:
            raise StoreGone(f"lost the rendezvous store at {self.addr}:{self.port}: {exc}") from None

    def _read(self, size: int, deadline: float) -> bytes:
        chunks, got = [], 0
        while got < size:
            left = deadline - time.monotonic()
            if left <= 0:
                raise StoreGone(f"the rendezvous store at {self.addr}:{self.port} did not answer in time")
            try:
                self.sock.settimeout(left)
                chunk = self.sock.recv(min(size - got, 1 << 20))
            except (socket.timeout, OSError) as exc:
                raise StoreGone(f"lost the rendezvous store at {self.addr}:{self.port}: {exc or 'timed out'}") \
                    from None
            if not chunk:
                raise StoreGone(f"the rendezvous store at {self.addr}:{self.port} closed the connection")
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def _reply(self, deadline: float, limit: int) -> tuple[int, int, bytes]:
        (size,) = LENGTH.unpack(self._read(LENGTH.size, deadline))
        if not REPLY.size <= size <= limit + REPLY.size:
            raise StoreGone(f"the rendezvous store at {self.addr}:{self.port} sent a {size}-byte reply")
        body = self._read(size, deadline)
        status, number = REPLY.unpack_from(body)
        return status, number, body[REPLY.size:]

    def call(self, op: bytes, keys: Sequence[bytes], number: int = 0, value: bytes = b"",
             wait_s: float = 0.0, limit: int = 1 << 30) -> tuple[int, int, bytes]:
        """(status, number, value). The server holds a waiting call up to wait_s; the reply must
        come within that and this connection's timeout."""
        with self.lock:
            deadline = time.monotonic() + wait_s + max(0.5, self.timeout)
            self._send(pack_request(op, keys, number, value), deadline)
            return self._reply(deadline, limit)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
