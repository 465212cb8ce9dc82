"""Failing fast and honestly, with real processes: a MASTER_ADDR that is not rank 0's host is
reported at once with the address that works; a bound used up by `import torch` says so;
Ctrl-C on the --local parent ends with a partial report, exit 2, no traceback and no ranks
left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time


from tests.conftest import distdoctor_argv
from tests.harness.ranks import (
    checks,
    clean_env,
    free_port,
    rank_env,
    report,
    require_torch,
)

# Each test starts its own ranks on leased ports and builds nothing shared: the torch workers
# take them one by one (tests/harness/groups.py), so that no worker runs this whole file.
SPREAD_OVER_WORKERS = True

SLOW_IMPORT = """
import importlib.abc, os, sys, time

class _Slow(importlib.abc.MetaPathFinder):
    # torch._C is imported only by `import torch` itself, not by a find_spec("torch") probe
    def find_spec(self, name, path, target=None):
        if name == "torch._C":
            sys.meta_path.remove(self)
            time.sleep(float(os.environ["DD_SLOW_IMPORT_S"]))
        return None

sys.meta_path.insert(0, _Slow())
"""


def test_master_addr_that_is_not_rank_0s_host_is_reported_at_once():
    """10.255.255.1 belongs to nobody here: rank 0 says so on stderr at once and reports within
    a few seconds with the address that would work, not at the 40 s bound."""
    require_torch()
    start = time.monotonic()
    proc = subprocess.run([*distdoctor_argv(), "nccl-test", "--timeout", "40", "--json"],
                          env=rank_env(0, 2, free_port(), addr="10.255.255.1"), capture_output=True, text=True,
                          timeout=60)
    wall = time.monotonic() - start
    doc = report(proc.stdout)
    assert proc.returncode == 1, proc.stderr
    assert wall < 25, wall  # interpreter and torch start-up on a loaded machine, plus the 5 s grace
    launch = checks(doc)["nccl-test.launch"]["findings"]
    [bad] = [f for f in launch if f["status"] == "fail"]
    assert "MASTER_ADDR 10.255.255.1 (10.255.255.1) is not an address of rank 0's host" in bad["summary"]
    suggested = bad["fix"].removeprefix("export MASTER_ADDR=")
    assert suggested and suggested != "10.255.255.1" and not suggested.startswith("127.")
    assert f"Use: export MASTER_ADDR={suggested}" in proc.stderr


def test_a_bound_used_up_by_import_torch_names_the_import():
    require_torch()
    with tempfile.TemporaryDirectory() as site:
        with open(os.path.join(site, "sitecustomize.py"), "w") as fh:
            fh.write(SLOW_IMPORT)
        env = rank_env(0, 2, free_port(), PYTHONPATH=site, DD_SLOW_IMPORT_S="30")
        start = time.monotonic()
        proc = subprocess.run([*distdoctor_argv(), "nccl-test", "--timeout", "6", "--json"], env=env,
                              capture_output=True, text=True, timeout=60)
        wall = time.monotonic() - start
    doc = report(proc.stdout)
    assert proc.returncode == 2, proc.stderr
    assert wall < 6 + 5
    launch = checks(doc)["nccl-test.launch"]
    assert launch["status"] == "timeout"
    first = launch["findings"][0]
    assert first["summary"] == "import torch did not finish within the 6 s bound", first
    assert "time by phase: import torch " in first["explanation"]
    assert "before any network was involved" in first["explanation"]
    assert [p["phase"] for p in doc["nccl_test"]["phases"]] == ["start", "import torch"]


def test_ctrl_c_on_the_local_parent_reports_what_is_known():
    """Ctrl-C while the --local parent (rank 0) is in the bench sweep: a partial report with the
    checks done so far, 'interrupted during bench', exit 2, no traceback, no rank left."""
    require_torch()
    import psutil

    argv = [*distdoctor_argv(), "nccl-test", "--local", "2", "--timeout", "60", "--json", "-v", "--bench",
            "-b", "1M", "-e", "64M", "-f", "2", "--iters", "50"]
    proc = subprocess.Popen(argv, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        kids = psutil.Process(proc.pid).children(recursive=True)
        lines: list[str] = []
        end = time.monotonic() + 45
        while time.monotonic() < end and not any("phase bench" in ln and "rank 0" in ln for ln in lines):
            line = proc.stderr.readline()
            if not line:
                break
            lines.append(line)
        assert any("phase bench" in ln for ln in lines), "".join(lines)[-2000:]
        kids = kids or psutil.Process(proc.pid).children(recursive=True)
        os.kill(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 2, err
    assert "Traceback" not in err
    doc = report(out)
    found = {c["id"]: c for c in doc["checks"]}
    assert found["nccl-test.rendezvous"]["status"] == "ok"  # what was done before Ctrl-C is kept
    [interrupted] = found["nccl-test.bench"]["findings"]
    assert interrupted["summary"].startswith("interrupted during bench (time by phase: ")
    time.sleep(0.3)
    assert kids and not [k for k in kids if k.is_running() and k.status() != psutil.STATUS_ZOMBIE]


def test_local_says_it_chose_the_rendezvous():
    require_torch()
    env = clean_env(MASTER_ADDR="10.9.9.9")
    proc = subprocess.run([*distdoctor_argv(), "nccl-test", "--local", "2", "--timeout", "40", "--json"], env=env,
                          capture_output=True, text=True, timeout=80)
    assert proc.returncode == 0, proc.stderr
    rendezvous = report(proc.stdout)["nccl_test"]["rendezvous"]
    assert rendezvous["master_addr"] == "127.0.0.1"
    assert rendezvous["addr_why"] == ("chosen by --local: every rank runs on this host "
                                      "(MASTER_ADDR=10.9.9.9 from the environment is ignored)")
    assert rendezvous["port_why"] == "chosen by --local: a free port (MASTER_PORT unset)"
    assert rendezvous["store_listens_on"] == "127.0.0.1"
    assert rendezvous["sealed_with"] == "DISTDOCTOR_JOB_TOKEN from the environment"


def test_ctrl_c_on_a_waiting_rank_ends_it_at_once():
    """Rank 1 waits for rank 0's plan (rank 2 never comes); Ctrl-C ends it within a second or
    two, with one line and exit 2, not at the 40 s bound."""
    require_torch()
    from tests.harness.ranks import Ranks

    port = free_port()
    with Ranks() as ranks:
        ranks.start(["--timeout", "40", "--json"], rank_env(0, 3, port))
        waiter = ranks.start(["--timeout", "40", "-v"], rank_env(1, 3, port))
        lines: list[str] = []
        end = time.monotonic() + 30
        while time.monotonic() < end and not any("phase rendezvous" in ln for ln in lines):
            lines.append(waiter.stderr.readline())
        assert any("phase rendezvous" in ln for ln in lines), lines
        time.sleep(1.5)  # inside the wait for rank 0's plan
        sent = time.monotonic()
        os.kill(waiter.pid, signal.SIGINT)
        err = waiter.stderr.read()
        waiter.wait(10)
        took = time.monotonic() - sent
    assert waiter.returncode == 2
    assert took < 5, took
    assert "interrupted in rendezvous" in err and "Traceback" not in err
