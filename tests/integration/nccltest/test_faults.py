"""Faults on one machine (loopback), each reported within the bound and naming the rank."""

import os
import signal
import subprocess
import threading
import time

import pytest

from tests.conftest import distdoctor_argv
from tests.harness.ranks import (
    Ranks,
    checks,
    clean_env,
    free_port,
    rank_env,
    report,
    require_torch,
    statuses,
)

MARGIN = 4.0  # interpreter start-up and the report, on a loaded 2-core machine
# Each test starts its own ranks on leased ports and builds nothing shared: the torch workers
# take them one by one (tests/harness/groups.py), so that no worker runs this whole file.
SPREAD_OVER_WORKERS = True


def test_world_size_larger_than_launched_names_the_missing_rank():
    # A bound of 20 s, not 8: rank 1 must have arrived by then even while other tests import
    # torch beside it; rank 2 never does, so rank 0 waits the whole bound either way.
    require_torch()
    port = free_port()
    with Ranks() as ranks:
        ranks.start(["--timeout", "20", "--json"], rank_env(0, 3, port))
        ranks.start(["--timeout", "20"], rank_env(1, 3, port))
        (rc0, out0, err0), (rc1, _out1, err1) = ranks.finish(20 + MARGIN)
    doc = report(out0)
    assert rc0 == 1 and rc1 == 1, (err0, err1)
    assert statuses(doc)["nccl-test.rendezvous"] == "fail"
    finding = checks(doc)["nccl-test.rendezvous"]["findings"][0]
    assert finding["summary"].startswith("rank 2 of 3 never arrived")
    assert finding["evidence"]["missing_ranks"] == [2]
    assert doc["nccl_test"]["missing_ranks"] == [2]
    assert statuses(doc)["nccl-test.all-reduce"] == "skip"


def _collect_lines(stream, lines: list[str]) -> None:
    for line in stream:
        lines.append(line)


@pytest.mark.parametrize("how", ["kill", "freeze"])
def test_rank_killed_or_frozen_in_the_middle_is_named(how):
    """Rank 1 dies (SIGKILL) or freezes (SIGSTOP) during the bench sweep: rank 0 reports within the
    bound that rank 1 stopped responding, instead of hanging in the collective."""
    require_torch()
    port = free_port()
    timeout = 15
    args = ["--timeout", str(timeout), "--bench", "-b", "1M", "-e", "64M", "-f", "2", "--iters", "20"]
    with Ranks() as ranks:
        lead = ranks.start([*args, "--json"], rank_env(0, 2, port))
        victim = ranks.start([*args, "-v"], rank_env(1, 2, port))
        lines: list[str] = []
        threading.Thread(target=_collect_lines, args=(victim.stderr, lines), daemon=True).start()
        end = time.monotonic() + timeout
        while not any("bench 2M" in ln for ln in lines) and time.monotonic() < end and victim.poll() is None:
            time.sleep(0.02)
        assert any("bench 2M" in ln for ln in lines), "".join(lines)[-2000:]
        os.kill(victim.pid, signal.SIGKILL if how == "kill" else signal.SIGSTOP)
        try:
            out0, err0 = lead.communicate(timeout=max(0.1, ranks.started + timeout + MARGIN - time.monotonic()))
        except subprocess.TimeoutExpired:
            pytest.fail(f"rank 0 still running {timeout + MARGIN} s after the start")
    doc = report(out0)
    assert lead.returncode in (1, 2), err0
    bench = checks(doc)["nccl-test.bench"]
    assert bench["status"] in ("fail", "timeout"), doc["checks"]
    text = " ".join(f["summary"] + " " + f["explanation"] for f in bench["findings"])
    assert "rank 1" in text and "stopped responding during bench" in text, text


def test_unresolvable_master_addr_is_named_by_every_rank():
    require_torch()
    port = free_port()
    with Ranks() as ranks:
        ranks.start(["--timeout", "7", "--json"], rank_env(0, 2, port, addr="no-such-host.invalid"))
        ranks.start(["--timeout", "7"], rank_env(1, 2, port, addr="no-such-host.invalid"))
        (rc0, out0, _), (rc1, _, err1) = ranks.finish(7 + MARGIN)
    doc = report(out0)
    assert rc0 == 1 and rc1 == 1  # a rank that cannot reach the rendezvous knows the job failed
    launch = checks(doc)["nccl-test.launch"]
    assert launch["status"] == "fail"
    assert any("does not resolve" in f["summary"] for f in launch["findings"])
    assert "cannot resolve no-such-host.invalid" in err1


def test_without_torch_says_how_to_install():
    code = ("import sys; sys.modules['torch'] = None; from distdoctor.cli import main; "
            "sys.exit(main(['nccl-test', '--local', '2']))")
    proc = subprocess.run([distdoctor_argv()[0].replace("distdoctor", "python")
                           if distdoctor_argv()[0].endswith("/distdoctor") else "python3", "-c", code],
                          env=clean_env(), capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    assert "needs PyTorch" in proc.stderr and "-m pip install torch" in proc.stderr


def test_rendezvous_port_already_in_use_is_refused_at_once():
    """The store's listener would share the port (SO_REUSEPORT) with whatever holds it and split
    the ranks between the two; rank 0 says so instead."""
    require_torch()
    import socket

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(8)
        port = holder.getsockname()[1]
        start = time.monotonic()
        proc = subprocess.run([*distdoctor_argv(), "nccl-test", "--timeout", "20", "--json"],
                              env=rank_env(0, 2, port), capture_output=True, text=True, timeout=40)
        wall = time.monotonic() - start
    doc = report(proc.stdout)
    assert proc.returncode == 1
    assert wall < 15  # it does not wait for the others
    summary = checks(doc)["nccl-test.rendezvous"]["findings"][0]["summary"]
    assert f"port {port}: something already listens there" in summary
