"""Inconsistent and hostile peers at the rendezvous, with real ranks on the loopback: two
processes claiming one rank, a rank of another world size, a stranger writing to the store,
garbage on the mesh port. Each is named, within the bound, without a traceback."""

from __future__ import annotations

import socket
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
    doc = report(out[0][1])
    assert [rc for rc, _, _ in out] == [1, 1, 1], [e for _, _, e in out]
    text = rendezvous_text(doc)
    assert "rank 1 is claimed by 2 processes: vm pid" in text.replace(doc["host"], "vm"), text
    assert "rank 2 of 3 never arrived" in text
    assert "Traceback" not in "".join(e for _, _, e in out)


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
    assert wall < TIMEOUT, "named when the rank arrives, not at the bound"


STRANGER = """
import datetime, sys
from torch.distributed import PrefixStore, TCPStore
raw = TCPStore("127.0.0.1", int(sys.argv[1]), None, False, datetime.timedelta(seconds=5), wait_for_workers=False)
store = PrefixStore("distdoctor-nccl-test//", raw)
store.append("roll", "not json at all")
store.append("roll", '\\n{"v": "{\\\\"rank\\\\": 1, \\\\"host\\\\": \\\\"intruder\\\\"}", "mac": "00"}\\n')
store.set("plan", "garbage")  # rank 0 overwrites it with its own sealed plan
print("written")
"""


def test_a_stranger_writing_to_the_store_is_named_and_the_job_still_runs():
    require_torch()
    port = free_port()
    timeout = 40  # the stranger imports torch too, while rank 0 waits for rank 1
    with Ranks() as ranks:
        ranks.start(["--timeout", str(timeout), "--json"], rank_env(0, 2, port))
        wait_port(port, timeout)
        stranger = subprocess.run([sys.executable, "-c", STRANGER, str(port)], capture_output=True, text=True,
                                  timeout=timeout)
        assert stranger.stdout.strip() == "written", stranger.stderr[-2000:]
        ranks.start(["--timeout", str(timeout)], rank_env(1, 2, port))
        out = ranks.finish(timeout + MARGIN)
    doc = report(out[0][1])
    found = statuses(doc)
    assert found["nccl-test.all-reduce"] == "ok", doc["checks"]
    assert found["nccl-test.rendezvous"] == "fail"
    text = rendezvous_text(doc)
    assert "2 values on the rendezvous did not come from this job" in text, text
    assert "intruder" in text  # what the stranger claims, marked unverified
    assert [rc for rc, _, _ in out] == [1, 1]


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
    with Ranks() as ranks:
        ranks.start(["--timeout", str(TIMEOUT), "--json"], rank_env(0, 2, port, DISTDOCTOR_JOB_TOKEN="job-a"))
        ranks.start(["--timeout", str(TIMEOUT)], rank_env(1, 2, port, DISTDOCTOR_JOB_TOKEN="job-b"))
        out = ranks.finish(TIMEOUT + MARGIN)
    doc = report(out[0][1])
    text = rendezvous_text(doc)
    assert "rank 1 of 2 never arrived" in text, text
    assert "1 value on the rendezvous did not come from this job: sealed with another job's token" in text
    assert "rank 1" in text.split("unverified:")[1]
    assert out[0][0] == 1 and out[1][0] == 1, out[1][2]
    assert "is not this job's" in out[1][2] and "Traceback" not in out[1][2]
