"""Strangers on the job's ports, with real sockets and real ranks on the loopback: an
unauthenticated `add("arrived", 1000)` and a flood of short lines on nccl-test's store (refused
before they reach it: the store wants the job's token first), and
garbage frames, forged claims and a connection flood on `check`'s job-report gather port. The
healthy ranks and nodes are still counted, the stranger is named, and what rank 0 reads and
holds stays bounded."""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import threading
import time

import pytest

from distdoctor.crosscheck import jobreport
from tests.harness.ranks import Ranks, checks, free_port, rank_env, report, require_torch, statuses

STRANGER = """
import datetime, sys
from torch.distributed import PrefixStore, TCPStore
try:
    raw = TCPStore("127.0.0.1", int(sys.argv[1]), None, False, datetime.timedelta(seconds=5), wait_for_workers=False)
    store = PrefixStore("distdoctor-nccl-test//", raw)
    store.add("arrived", 1000)  # the count is not signed: rank 0 must not stop waiting for it
    store.append("roll", "x\\n" * int(sys.argv[2]))  # short lines: counted past a bound, not parsed
    print("written")
except Exception as exc:  # distdoctor's store wants the job's token before any request
    print("refused:", type(exc).__name__)
"""


@pytest.mark.parametrize("lines", [10, 200_000])
def test_an_inflated_arrival_count_does_not_make_a_healthy_rank_missing(lines):
    require_torch()
    port = free_port()
    timeout = 45
    with Ranks() as ranks:
        ranks.start(["--timeout", str(timeout), "--json"], rank_env(0, 2, port))
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.05)
        stranger = subprocess.run([sys.executable, "-c", STRANGER, str(port), str(lines)], capture_output=True,
                                  text=True, timeout=timeout)
        assert stranger.stdout.startswith("refused"), stranger.stderr[-2000:]
        time.sleep(1.0)  # rank 1 comes late: rank 0 has read the inflated count by now
        ranks.start(["--timeout", str(timeout)], rank_env(1, 2, port))
        out = ranks.finish(timeout + 25)  # a run that passes ends long before; at load 20 the bound's report took over 10 s
    doc = report(out[0][1])
    found = statuses(doc)
    summaries = {c["id"]: [f["summary"] for f in c["findings"]] for c in doc["checks"]}
    assert found["nccl-test.all-reduce"] == "ok", summaries.get("nccl-test.rendezvous")
    text = " | ".join(f["summary"] for f in checks(doc)["nccl-test.rendezvous"]["findings"])
    assert "never arrived" not in text, text
    assert "did not come from this job" in text, text  # the stranger's lines are named
    assert "Traceback" not in "".join(e for _, _, e in out)


def _plan(port: int = 0, node: str = "a") -> jobreport.Plan:
    return jobreport.Plan("gatherer" if node == "a" else "leader", 2, ("a", "b"), "127.0.0.1", port, "slurm:7.0", node)


def _send_raw(port: int, data: bytes, hold: bool = False) -> socket.socket | None:
    sock = socket.create_connection(("127.0.0.1", port), timeout=2)
    sock.sendall(data)
    if hold:
        return sock
    sock.close()
    return None


GARBAGE = [
    b"GET / HTTP/1.0\r\n\r\n",
    struct.pack(">I", 10) + b"\x00" * 32 + b"0123456789",  # a well-formed frame with a wrong MAC
    struct.pack(">I", 2**31) + b"x" * 40,  # a frame claiming 2 GiB
    struct.pack(">I", 20) + b"\x00" * 32 + b'{"node": "b", "x": 1',  # a forged claim to be node b
    b"\x00\x00",  # a frame cut short
]


@pytest.mark.parametrize("garbage", GARBAGE, ids=["http", "bad-mac", "2-gib-length", "claims-node-b", "short"])
def test_a_garbage_frame_does_not_count_as_a_nodes_report(garbage):
    """The stranger's frame arrives first; the real node's report a second later is still taken."""
    p = _plan()
    key = jobreport.job_key(b"k" * 32, p.seed)
    gatherer = jobreport.Gatherer(p, key, "127.0.0.1")
    try:
        port = gatherer.sock.getsockname()[1]
        _send_raw(port, garbage)
        box = {}

        def node_b():
            time.sleep(1.0)
            box["why"] = jobreport.send_report(_plan(port, "b"), key, {"host": "b"}, time.monotonic() + 10)

        sender = threading.Thread(target=node_b)
        sender.start()
        got = gatherer.wait(1, time.monotonic() + 10)
        sender.join(10)
    finally:
        gatherer.close()
    assert got == {"b": {"host": "b"}}, gatherer.rejected
    assert box["why"] == ""
    if garbage != b"\x00\x00":  # a cut frame ends with the connection; the others are named
        assert any("127.0.0.1" in why for why in gatherer.rejected.values()), gatherer.rejected


def test_a_flood_of_connections_is_bounded_and_the_real_report_still_arrives():
    import psutil

    p = _plan()
    key = jobreport.job_key(b"k" * 32, p.seed)
    gatherer = jobreport.Gatherer(p, key, "127.0.0.1")
    held = []
    before = len(psutil.Process().threads())
    try:
        port = gatherer.sock.getsockname()[1]
        for _ in range(300):  # each sends half a header and holds the connection open
            try:
                held.append(_send_raw(port, b"\x00\x00", hold=True))
            except OSError:
                break
        time.sleep(1.0)
        threads = len(psutil.Process().threads()) - before
        box = {}
        sender = threading.Thread(target=lambda: box.update(
            why=jobreport.send_report(_plan(port, "b"), key, {"host": "b"}, time.monotonic() + 40)))
        sender.start()
        got = gatherer.wait(1, time.monotonic() + 40)
        sender.join(40)
    finally:
        for sock in held:
            sock.close()
        gatherer.close()
    assert threads <= jobreport.MAX_CONNECTIONS + 4, threads
    assert got == {"b": {"host": "b"}} and box["why"] == ""
