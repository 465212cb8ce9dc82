"""distdoctor's rendezvous store (store_server.py) against real clients and hostile peers on
the loopback: a stranger's bytes never reach the key space, every bound holds, every stranger
is named, and the job's own clients are served throughout."""

from __future__ import annotations

import socket
import struct
import time

import pytest

from distdoctor.nccltest import store_server, store_wire as wire
from distdoctor.nccltest.store import listen
from tests.harness.runprefix import free_port

TOKEN = "job-token"


@pytest.fixture
def server():
    port = free_port("127.0.0.1")
    srv = store_server.Server(listen("127.0.0.1", port), TOKEN,
                              store_server.Limits(value_bytes=1 << 20, total_bytes=4 << 20, keys=200, connections=32,
                                                  pending=8, hello_s=1.0, frame_s=1.0)).start()
    srv.port = port
    try:
        yield srv
    finally:
        srv.close()


def client(srv, token=TOKEN, **claims) -> wire.Connection:
    return wire.Connection("127.0.0.1", srv.port, token, {"host": "h1", "pid": 1, "rank": 1, "world_size": 2,
                                                           **claims}, timeout=3)


def raw(srv) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=3)
    assert sock.recv(wire.GREETING, socket.MSG_WAITALL)[:len(wire.MAGIC)] == wire.MAGIC
    return sock


def wait_named(srv, count: int, seconds: float = 5.0) -> list[store_server.Stranger]:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        named, more = srv.named()
        if len(named) + more >= count:
            return named
        time.sleep(0.02)
    return srv.named()[0]


def served(srv) -> None:
    """The job's own client still works after the attack."""
    conn = client(srv)
    assert conn.call(wire.SET, [b"after"], value=b"ok")[0] == wire.OK
    assert conn.call(wire.GET, [b"after"], 100, wait_s=0.1) == (wire.OK, 0, b"ok")
    conn.close()


def test_the_job_s_clients_set_get_add_append_wait_and_compare(server):
    a, b = client(server), client(server, rank=0)
    assert a.call(wire.SET, [b"k"], value=b"v")[0] == wire.OK
    assert b.call(wire.GET, [b"k"], 1000, wait_s=1) == (wire.OK, 0, b"v")
    assert a.call(wire.ADD, [b"n"], 5)[1] == 5 and b.call(wire.ADD, [b"n"], 2)[1] == 7
    a.call(wire.APPEND, [b"roll"], value=b"x")
    a.call(wire.APPEND, [b"roll"], value=b"y")
    assert b.call(wire.GET, [b"roll"], 0)[2] == b"xy"
    assert b.call(wire.CHECK, [b"k", b"roll"])[1] == 1 and b.call(wire.CHECK, [b"k", b"none"])[1] == 0
    started = time.monotonic()
    assert b.call(wire.WAIT, [b"never"], 300, wait_s=0.3)[0] == wire.MISSING
    assert 0.25 < time.monotonic() - started < 2
    assert a.call(wire.CAS, [b"k"], value=(1).to_bytes(4, "big") + b"v" + b"w")[2] == b"w"
    assert a.call(wire.DELETE, [b"k"])[1] == 1 and a.call(wire.NUM_KEYS, [])[1] == 2
    assert server.named() == ([], 0)


def test_a_wait_is_answered_when_another_client_writes(server):
    import threading

    a, b = client(server), client(server)
    got = []
    waiter = threading.Thread(target=lambda: got.append(b.call(wire.GET, [b"late"], 5000, wait_s=5)))
    waiter.start()
    time.sleep(0.2)
    a.call(wire.SET, [b"late"], value=b"here")
    waiter.join(5)
    assert got == [(wire.OK, 0, b"here")]


@pytest.mark.parametrize("token", ["another-job", "", "job-token "])
def test_another_job_s_token_is_refused_and_named_with_its_claims(server, token):
    with pytest.raises(wire.NotThisJob, match="refused this job's token"):
        client(server, token=token, host="intruder", rank=3)
    named = wait_named(server, 1)
    assert "another job's token" in named[0].why
    assert named[0].claims == {"host": "intruder", "pid": 1, "rank": 3, "world_size": 2}
    served(server)


GARBAGE = {
    "http": b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    "tcpstore ping": struct.pack("<BI", 8, 4437),  # torch's TCPStore client validates with a ping
    "binary": bytes(range(256)) * 4,
    "empty frame": struct.pack("!I", 0),
    "short mac": struct.pack("!I", 5) + b"abcde",
    "json claims, no mac": struct.pack("!I", 40) + b'{"host":"x","rank":1}'.ljust(40, b" "),
}


@pytest.mark.parametrize("payload", list(GARBAGE.values()), ids=list(GARBAGE))
def test_garbage_before_the_hello_is_named_and_dropped(server, payload):
    sock = raw(server)
    sock.sendall(payload)
    sock.settimeout(3)
    try:
        rest = sock.recv(4096)
    except OSError:
        rest = b""
    sock.close()
    named = wait_named(server, 1)
    assert named, f"not named: {payload[:20]!r} (server answered {rest[:20]!r})"
    assert server.data == {}
    served(server)


def test_a_gigabyte_append_is_cut_off_after_a_hello_s_worth(server):
    """A stranger announces and streams 1 GiB: the server reads at most a hello's bytes, then
    closes; the stranger's send fails long before the gigabyte is out."""
    sock = raw(server)
    sock.settimeout(5)
    chunk = b"\0" * (1 << 20)
    sent = 0
    started = time.monotonic()
    with pytest.raises(OSError):
        sock.sendall(struct.pack("!I", (1 << 30) - 1))
        while sent < 1 << 30:
            sock.sendall(chunk)
            sent += len(chunk)
    sock.close()
    assert sent < 64 << 20, f"{sent} bytes went out before the server hung up"
    assert time.monotonic() - started < 5
    assert "over the 4096-byte bound" in wait_named(server, 1)[0].why
    assert server.total == 0
    served(server)


def test_a_member_s_writes_past_the_bounds_are_refused_not_stored(server):
    conn = client(server)
    status, _, why = conn.call(wire.SET, [b"big"], value=b"x" * ((1 << 20) + 1))
    assert status == wire.FULL and b"over the" in why
    for i in range(4):
        assert conn.call(wire.SET, [f"chunk{i}".encode()], value=b"x" * (1 << 20))[0] == wire.OK
    assert conn.call(wire.SET, [b"one more"], value=b"x" * 1000)[0] == wire.FULL  # 4 MiB in all
    conn.call(wire.DELETE, [b"chunk0"])
    refused = sum(conn.call(wire.SET, [f"k{i}".encode()], value=b"")[0] == wire.FULL for i in range(10 ** 3))
    assert len(server.data) == 200 and refused == 1000 - 197
    assert conn.call(wire.APPEND, [b"chunk1"], value=b"y")[0] == wire.FULL  # over a value's bound
    assert server.total <= 4 << 20


def test_ten_to_the_five_keys_from_a_stranger_never_reach_the_store(server):
    sock = raw(server)
    frames = b"".join(wire.pack_request(wire.SET, [f"k{i}".encode()], value=b"v") for i in range(10 ** 5))
    try:
        sock.sendall(frames)
    except OSError:
        pass
    sock.close()
    assert wait_named(server, 1)
    assert server.data == {}
    served(server)


def test_a_slow_writer_is_cut_off_at_the_hello_bound_and_named(server):
    sock = raw(server)
    started = time.monotonic()
    try:
        for byte in struct.pack("!I", 64) + b"x" * 10:
            sock.send(bytes([byte]))
            time.sleep(0.1)
    except OSError:
        pass
    named = wait_named(server, 1, seconds=4)
    assert named and "slow writer" in named[0].why
    assert time.monotonic() - started < 4
    sock.close()
    served(server)


def test_a_member_s_unfinished_frame_is_cut_off(server):
    conn = client(server)
    conn.sock.sendall(struct.pack("!I", 100) + b"S")
    named = wait_named(server, 1, seconds=4)
    assert "unfinished" in named[0].why and named[0].claims["rank"] == 1
    served(server)


def test_a_flood_of_idle_connections_does_not_keep_the_job_out(server):
    idle = [socket.create_connection(("127.0.0.1", server.port), timeout=3) for _ in range(40)]
    try:
        time.sleep(0.3)
        served(server)  # a rank's hello comes within milliseconds: the oldest idle ones are cut off
        assert any("flood" in s.why for s in wait_named(server, 1))
    finally:
        for sock in idle:
            sock.close()


def test_a_port_probe_is_not_a_stranger(server):
    for _ in range(5):
        socket.create_connection(("127.0.0.1", server.port), timeout=3).close()
    time.sleep(0.3)
    served(server)
    assert server.named() == ([], 0)


def test_strangers_past_the_first_are_counted(server):
    for _ in range(store_server.Limits().strangers + 10):
        with pytest.raises(wire.NotThisJob):
            client(server, token="other")
    named, more = server.named()
    assert len(named) == 64 and more == 10


def test_a_client_learns_a_port_that_is_not_a_distdoctor_store():
    port = free_port("127.0.0.1")
    sock = listen("127.0.0.1", port)
    try:
        import threading

        def answer():
            peer, _ = sock.accept()
            peer.sendall(b"SSH-2.0-OpenSSH_9.2\r\n" + b"\0" * 8)
            time.sleep(0.5)
            peer.close()
        threading.Thread(target=answer, daemon=True).start()
        with pytest.raises(wire.NotThisJob, match="not a distdoctor rendezvous store"):
            wire.Connection("127.0.0.1", port, TOKEN, {}, timeout=3)
    finally:
        sock.close()
