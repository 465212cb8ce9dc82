"""Inconsistent and hostile peers at the rendezvous, with real ranks on the loopback: two
processes claiming one rank, a rank of another world size, a stranger writing to the store,
garbage on the mesh port. Each is named, within the bound, without a traceback."""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import time

import pytest

from tests.harness.ranks import (
    Ranks,
    checks,
    free_port,
    rank_env,
    report,
    require_torch,
    statuses,
)

MARGIN = 5.0
TIMEOUT = 30  # the bound includes import torch, which a loaded machine can stretch past 10 s
# Each test starts its own ranks on leased ports and builds nothing shared: the torch workers
# take them one by one (tests/harness/groups.py), so that no worker runs this whole file.
SPREAD_OVER_WORKERS = True


def wait_port(port: int, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    pytest.fail(f"nothing listens on {port}")


def rendezvous_text(doc) -> str:
    return " | ".join(f["summary"] for f in checks(doc)["nccl-test.rendezvous"]["findings"])


def test_two_processes_claiming_rank_1_are_both_named():
    require_torch()
    port = free_port()
    with Ranks() as ranks:
        ranks.start(["--timeout", str(TIMEOUT), "--json"], rank_env(0, 3, port))
        ranks.start(["--timeout", str(TIMEOUT)], rank_env(1, 3, port))
        ranks.start(["--timeout", str(TIMEOUT)], rank_env(1, 3, port))
        out = ranks.finish(TIMEOUT + MARGIN)
        wall = time.monotonic() - ranks.started
    doc = report(out[0][1])
    assert [rc for rc, _, _ in out] == [1, 1, 1], [e for _, _, e in out]
    text = rendezvous_text(doc)
    assert "rank 1 is claimed by 2 processes: vm pid" in text.replace(doc["host"], "vm"), text
    assert "rank 2 of 3 never arrived" in text and "rank 0 stopped waiting there" in text, text
    assert "Traceback" not in "".join(e for _, _, e in out)
    # The duplicate already means the job cannot run: rank 2 is given a grace, not the bound.
    assert wall < TIMEOUT / 2, wall


def test_a_rank_of_another_world_size_is_named_at_once():
    require_torch()
    port = free_port()
    with Ranks() as ranks:
        ranks.start(["--timeout", str(TIMEOUT), "--json"], rank_env(0, 2, port))
        ranks.start(["--timeout", str(TIMEOUT)], rank_env(1, 3, port))
        out = ranks.finish(TIMEOUT + MARGIN)
        wall = time.monotonic() - ranks.started
    doc = report(out[0][1])
    assert [rc for rc, _, _ in out] == [1, 1], [e for _, _, e in out]
    text = rendezvous_text(doc)
    assert "1 process of this job thinks the world size is 3, not 2: rank 1 (" in text, text
    assert wall < TIMEOUT / 2, f"named when the rank arrives, not at the bound: {wall:.1f} s"


STRANGER = """
import datetime, sys
from torch.distributed import TCPStore
try:
    raw = TCPStore("127.0.0.1", int(sys.argv[1]), None, False, datetime.timedelta(seconds=5), wait_for_workers=False)
    raw.append("distdoctor-nccl-test//roll", "x" * (1 << 30))
    print("written")
except Exception as exc:
    print("refused:", type(exc).__name__)
"""


def _gigabyte(port: int) -> int:
    """Streams a frame that claims 1 GiB; the bytes that went out before the store hung up."""
    sent = 0
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(struct.pack("!I", (1 << 30) - 1))
            chunk = b"\0" * (1 << 20)
            while sent < 1 << 30:
                sock.sendall(chunk)
                sent += len(chunk)
    except OSError:
        pass
    return sent


def _many_keys(port: int) -> None:
    frames = b"".join(struct.pack("!I", 12) + b"S" + bytes(8) + b"\0\1\0" + bytes([i % 256]) for i in range(10 ** 5))
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(frames)
    except OSError:
        pass


def _slow_writer(port: int, seconds: float) -> None:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(struct.pack("!I", 64))  # a hello's size, then a byte at a time
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                sock.send(b"\1")
                time.sleep(0.5)
    except OSError:
        pass


def _garbage(port: int) -> None:
    for payload in (b"GET / HTTP/1.1\r\n\r\n", bytes(range(256)) * 8, struct.pack("!I", 0xFFFFFFFF)):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
                sock.sendall(payload)
                sock.recv(64)
        except OSError:
            pass


def test_strangers_at_the_store_cost_rank_0_nothing_and_are_named():
    """While rank 0 waits for rank 1, strangers try torch's TCPStore append of 1 GiB, a raw
    1 GiB frame, 10^5 key frames, a slow writer and garbage frames. None is kept: rank 0's
    memory stays where torch put it, both ranks pass their collectives, and the strangers are
    named (a warning: this job was not harmed)."""
    require_torch()
    import threading

    import psutil

    port = free_port()
    timeout = 45  # the stranger imports torch too, while rank 0 waits for rank 1
    peak = [0]
    with Ranks() as ranks:
        rank0 = ranks.start(["--timeout", str(timeout), "--json"], rank_env(0, 2, port))
        wait_port(port, timeout)
        proc = psutil.Process(rank0.pid)
        before = proc.memory_info().rss
        done = threading.Event()

        def watch() -> None:
            while not done.is_set():
                try:
                    peak[0] = max(peak[0], proc.memory_info().rss)
                except psutil.Error:
                    return
                time.sleep(0.02)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        sent: list[int] = []
        attacks = [threading.Thread(target=lambda: sent.append(_gigabyte(port))),
                   threading.Thread(target=_many_keys, args=(port,)),
                   threading.Thread(target=_slow_writer, args=(port, 15)),
                   threading.Thread(target=_garbage, args=(port,))]
        for attack in attacks:
            attack.start()
        stranger = subprocess.run([sys.executable, "-c", STRANGER, str(port)], capture_output=True, text=True,
                                  timeout=timeout)
        for attack in attacks:
            attack.join(timeout)
        ranks.start(["--timeout", str(timeout)], rank_env(1, 2, port))
        out = ranks.finish(timeout + MARGIN)
        done.set()
    doc = report(out[0][1])
    assert stranger.stdout.startswith("refused"), (stranger.stdout, stranger.stderr[-2000:])
    assert sent and sent[0] < 64 << 20, sent
    grown = peak[0] - before
    assert grown < 64 << 20, f"rank 0 grew by {grown >> 20} MiB under the attack (from {before >> 20} MiB)"
    found = statuses(doc)
    assert found["nccl-test.all-reduce"] == "ok", doc["checks"]
    assert found["nccl-test.rendezvous"] == "warn", doc["checks"]
    text = rendezvous_text(doc)
    assert "all 2 ranks arrived" in text, text
    turned = next(f for f in checks(doc)["nccl-test.rendezvous"]["findings"] if f["status"] == "warn")
    whys = " | ".join(t["why"] for t in turned["evidence"]["turned_away"])
    for why in ("over the 4096-byte bound", "slow writer", "not a distdoctor hello"):
        assert why in whys, whys
    assert "Traceback" not in "".join(e for _, _, e in out)
    assert [rc for rc, _, _ in out] == [0, 0], [e[-2000:] for _, _, e in out]


def test_garbage_on_the_mesh_port_does_not_stop_the_mesh():
    """While two ranks run with --mesh, a stranger finds every port they listen on (but the
    rendezvous) as soon as it opens, sends junk, and holds twenty more connections open with a
    line that never ends; the mesh still passes and the test ends well within the bound."""
    require_torch()
    import psutil

    port = free_port()
    held: list[socket.socket] = []
    sent = 0
    with Ranks() as ranks:
        procs = [ranks.start(["--timeout", str(TIMEOUT), "--mesh", "--json"], rank_env(0, 2, port)),
                 ranks.start(["--timeout", str(TIMEOUT), "--mesh"], rank_env(1, 2, port))]
        attacked: set[tuple[str, int]] = set()
        try:
            while any(p.poll() is None for p in procs):
                for proc in procs:
                    try:
                        listening = {(c.laddr.ip, c.laddr.port) for c in
                                     psutil.Process(proc.pid).net_connections("tcp")
                                     if c.status == psutil.CONN_LISTEN and c.laddr.port != port}
                    except psutil.Error:
                        continue
                    for addr in listening - attacked:
                        attacked.add(addr)
                        try:
                            with socket.create_connection(addr, timeout=0.5) as sock:
                                sock.sendall(b"\x00garbage\xff" * 100 + b"\n")
                                sent += 1
                            for _ in range(20):
                                sock = socket.create_connection(addr, timeout=0.5)
                                sock.sendall(b"DDNT1 never-ending")
                                held.append(sock)
                        except OSError:
                            pass
                # The ranks listen for only a fraction of a second once torch is imported: look
                # often until the attack is made, then leave the CPU to the ranks.
                time.sleep(0.2 if sent else 0.01)
            out = ranks.finish(TIMEOUT + MARGIN)
            wall = time.monotonic() - ranks.started
        finally:
            for sock in held:
                sock.close()
    doc = report(out[0][1])
    assert sent > 0 and held
    assert statuses(doc)["nccl-test.mesh"] == "ok", " | ".join(f["summary"] for c in doc["checks"]
                                                            for f in c["findings"])
    assert [rc for rc, _, _ in out] == [0, 0]
    assert wall < TIMEOUT


def test_a_rank_of_another_job_on_the_same_port_is_named_by_both_sides():
    """Job A's rank 0 and job B's rank 1 meet on one port (each job has its own token): A names
    a value that is not its job's, with what it claims, and its own rank 1 as missing; B's rank
    says the rendezvous is another job's. Neither passes."""
    require_torch()
    port = free_port()
    # A's own rank 1 never comes, so A's rank 0 waits to its rendezvous deadline (three quarters
    # of the bound): enough for B's rank to start and be turned away on a loaded machine, and
    # 12 s less than TIMEOUT.
    bound = 18
    with Ranks() as ranks:
        ranks.start(["--timeout", str(bound), "--json"], rank_env(0, 2, port, DISTDOCTOR_JOB_TOKEN="job-a"))
        ranks.start(["--timeout", str(bound)], rank_env(1, 2, port, DISTDOCTOR_JOB_TOKEN="job-b"))
        out = ranks.finish(bound + MARGIN)
    doc = report(out[0][1])
    text = rendezvous_text(doc)
    assert "rank 1 of 2 never arrived" in text, text
    assert ("1 connection to the rendezvous did not come from this job, turned away: 127.0.0.1:" in text
            and "sealed with another job's token" in text), text
    assert "rank 1" in text.split("unverified:")[1]
    assert out[0][0] == 1 and out[1][0] == 1, out[1][2]
    assert "is not this job's" in out[1][2] and "Traceback" not in out[1][2]
