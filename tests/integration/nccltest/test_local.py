"""`distdoctor nccl-test --local N` on gloo, for real."""

import subprocess
import time

import psutil
import pytest

from tests.conftest import distdoctor_argv
from tests.harness.ranks import checks, clean_env, report, require_torch, statuses



def run_local(*args: str, timeout: float = 60) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    proc = subprocess.run([*distdoctor_argv(), "nccl-test", *args], env=clean_env(), capture_output=True,
                          text=True, timeout=timeout)
    return proc, time.monotonic() - start


@pytest.fixture(scope="module")
def two_ranks_with_bench():
    """One `--local 2 --bench --json` run read by two tests: each run starts three Pythons that
    import torch, the most expensive thing in this file, and the bench rows change nothing the
    pass/fail checks judge."""
    require_torch()
    proc, _ = run_local("--local", "2", "--timeout", "40", "--bench", "-b", "1K", "-e", "4K", "-f", "2", "--json")
    return proc, report(proc.stdout)


def test_local_two_ranks_on_gloo_pass_and_leave_no_process(two_ranks_with_bench):
    proc, doc = two_ranks_with_bench
    assert proc.returncode == 0, proc.stderr
    assert doc["command"] == "nccl-test" and doc["status"] == "ok"
    found = statuses(doc)
    for check_id in ("nccl-test.rendezvous", "nccl-test.init", "nccl-test.all-reduce", "nccl-test.broadcast",
                     "nccl-test.all-gather", "nccl-test.cross-rank"):
        assert found[check_id] == "ok", (check_id, doc)
    assert found["nccl-test.mesh"] == "skip"  # one host: off unless --mesh
    assert "= 3" in checks(doc)["nccl-test.all-reduce"]["findings"][0]["summary"]
    extra = doc["nccl_test"]
    assert extra["backend"] == "gloo"
    assert extra["rendezvous"]["master_addr"] == "127.0.0.1"
    pids = [fp["pid"] for fp in extra["fingerprints"]]
    assert len(pids) == 2 and [fp["rank"] for fp in extra["fingerprints"]] == [0, 1]
    time.sleep(0.2)
    assert not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


def test_local_bench_and_mesh_console():
    require_torch()
    proc, _ = run_local("--local", "3", "--timeout", "40", "--mesh", "--bench", "-b", "4K", "-e", "64K", "-f", "4")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "all 6 rank-to-rank connections work" in out
    # the bench table: three sizes, each checked
    assert "busbw (GB/s)" in out and "4K" in out and "16K" in out and "64K" in out
    assert "3 sizes, all correct" in out


def test_local_json_bench_rows_are_consistent(two_ranks_with_bench):
    _proc, doc = two_ranks_with_bench
    rows = doc["nccl_test"]["bench"]
    assert [r["bytes"] for r in rows] == [1024, 2048, 4096]
    for row in rows:
        assert row["ok"] and row["busbw_gbs"] == pytest.approx(row["algbw_gbs"] * 2 * (2 - 1) / 2, rel=1e-3, abs=1e-4)


def test_usage_errors_exit_64():
    proc, _ = run_local("--timeout", "5", "-b", "lots", timeout=30)
    assert proc.returncode == 64 and "bench sizes" in proc.stderr
    proc, _ = run_local("--timeout", "5", timeout=30)  # no launcher, no --local
    assert proc.returncode == 64 and "--local N" in proc.stderr


def test_local_with_a_frozen_child_ends_at_the_bound_and_kills_its_children():
    require_torch()
    import os
    import signal

    timeout = 10
    start = time.monotonic()
    parent = subprocess.Popen([*distdoctor_argv(), "nccl-test", "--local", "3", "--timeout", str(timeout), "--json",
                               "--bench", "-b", "1M", "-e", "64M", "-f", "2", "--iters", "30"],
                              env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        kids: list[psutil.Process] = []
        while len(kids) < 2 and time.monotonic() - start < timeout:
            kids = psutil.Process(parent.pid).children()
            time.sleep(0.05)
        assert len(kids) == 2
        time.sleep(4)  # into the collectives (start-up and import included)
        os.kill(kids[-1].pid, signal.SIGSTOP)
        out, err = parent.communicate(timeout=timeout + 6)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
    assert time.monotonic() - start < timeout + 5
    assert parent.returncode in (1, 2), err
    assert out.strip(), err
    doc = report(out)
    assert doc["status"] in ("fail", "timeout", "error")
    time.sleep(0.2)
    left = [k.pid for k in kids if psutil.pid_exists(k.pid) and k.status() != psutil.STATUS_ZOMBIE]
    assert not left


def test_forcing_nccl_without_a_gpu_is_a_finding_not_a_crash():
    require_torch()
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the nccl path would run")
    proc, _ = run_local("--local", "2", "--backend", "nccl", "--timeout", "30", "--json")
    doc = report(proc.stdout)
    assert proc.returncode == 1, proc.stderr
    init = checks(doc)["nccl-test.init"]
    assert init["status"] == "fail"
    assert "--backend nccl, but ranks 0-1 have no usable CUDA GPU with NCCL" in init["findings"][0]["summary"]
    assert "internal error" not in proc.stderr


def test_local_honours_master_port_and_a_port_option():
    """A site that opens one port for the rendezvous sets MASTER_PORT (or passes --port): --local
    serves there instead of a random port."""
    require_torch()
    from tests.harness.ranks import free_port

    for how in ("env", "flag"):
        port = free_port()
        env = clean_env(MASTER_PORT=str(port)) if how == "env" else clean_env()
        args = ["--port", str(port)] if how == "flag" else []
        proc = subprocess.run([*distdoctor_argv(), "nccl-test", "--local", "2", "--timeout", "40", *args, "--json"],
                              env=env, capture_output=True, text=True, timeout=60)
        doc = report(proc.stdout)
        assert proc.returncode == 0, proc.stderr
        rendezvous = doc["nccl_test"]["rendezvous"]
        assert rendezvous["master_port"] == port, rendezvous
        assert rendezvous["port_why"] == ("--port" if how == "flag" else "MASTER_PORT from the environment")
