"""Host.converse over real loopback sockets: a listener that speaks RAS's line protocol and
replays a captured report, one that answers garbage, one that never answers, a closed port."""

import socket
import threading
import time

from distdoctor.hang import ras
from distdoctor.host import Host
from distdoctor.testing import fixture_text
from tests.conftest import data_path


def serve(behaviour):
    """A one-connection listener on 127.0.0.1:0 in a thread; returns (port, thread, received)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    received = []

    def run():
        listener.settimeout(10)
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        with conn:
            behaviour(conn, received)
        listener.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return listener.getsockname()[1], thread, received


def ras_like(report: str):
    def behaviour(conn, received):
        reader = conn.makefile("rb")
        for reply in ("SERVER PROTOCOL 2\n", "OK\n", "OK\n", None):
            line = reader.readline().decode()
            received.append(line.strip())
            if reply is None:
                conn.sendall(report.encode())
                return
            conn.sendall(reply.encode())
    return behaviour


def test_a_ras_listener_is_queried_and_its_report_parsed():
    report = fixture_text(data_path("nccl_ras", "json_2.28.9_healthy_ray64928.json"))
    port, thread, received = serve(ras_like(report))
    parsed, error = ras.query(Host(), ("127.0.0.1", port), True, 2, 5.0)
    thread.join(5)
    assert error == "" and received == ["CLIENT PROTOCOL 2", "TIMEOUT 2", "SET FORMAT json", "STATUS"]
    assert parsed["version"] == "2.28.9" and len(parsed["comms"]) == 1


def test_garbage_silence_and_a_closed_port_are_each_an_answer_within_the_bound():
    def garbage(conn, received):
        conn.sendall(b"220 smtp.example ESMTP\r\n")
        time.sleep(0.5)

    def silent(conn, received):
        time.sleep(4)

    port, _t, _r = serve(garbage)
    parsed, error = ras.query(Host(), ("127.0.0.1", port), True, 1, 2.0)
    assert parsed is None and "not NCCL RAS" in error

    port, _t, _r = serve(silent)
    started = time.monotonic()
    parsed, error = ras.query(Host(), ("127.0.0.1", port), True, 1, 1.0)
    assert parsed is None and error == "no answer within 1 s"
    assert time.monotonic() - started < 2.5

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    parsed, error = ras.query(Host(), ("127.0.0.1", closed), True, 1, 1.0)
    assert parsed is None and error == "refused"


def _trickle(every: float, first: bytes = b""):
    """A peer that sends `first`, then one byte every `every` seconds, never a newline."""
    def behaviour(conn, received):
        conn.settimeout(0.5)
        try:
            received.append(conn.recv(4096))
            conn.sendall(first)
            for _ in range(200):
                conn.sendall(b"x")
                time.sleep(every)
        except OSError:
            pass
    return behaviour


def test_a_peer_that_trickles_bytes_is_cut_at_the_bound():
    """A RAS port (or anything on it) that answers a byte at a time, within each recv's timeout
    but never finishing a line: the whole exchange still ends at the bound, in the first reply
    line, mid-way, and after the last request."""
    for first in (b"", b"SERVER PROTOCOL 2\n", b"SERVER PROTOCOL 2\nOK\n"):
        port, thread, _ = serve(_trickle(0.05, first))
        started = time.monotonic()
        replies, why = Host().converse("127.0.0.1", port, ["CLIENT PROTOCOL 2", "TIMEOUT 5", "STATUS"], timeout=1.0)
        took = time.monotonic() - started
        assert took < 2.0, (first, took)
        assert why == "no answer within 1 s", (first, why, replies)
        thread.join(15)
