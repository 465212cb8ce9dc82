"""Hostile conditions, for real: a stack dumper that hangs (a stand-in py-spy that never
answers) must be killed at the bound with nothing left running; a user without ptrace rights
(uid 65534 against a root-owned rank) must get the reason and the way to allow it."""

import os
import shutil
import subprocess
import sys
import time

import pytest

from tests.conftest import distdoctor_argv, load_report
from tests.harness.ranks import clean_env
from tests.integration.hang.test_live_torchrun import findings

RANK_CODE = "import time\nwhile True: time.sleep(0.2)\n"


def rank_process(**env):
    return subprocess.Popen([sys.executable, "-c", RANK_CODE], env=clean_env(RANK="0", WORLD_SIZE="1", **env),
                            start_new_session=True)


def test_a_hanging_dumper_is_killed_at_the_bound_and_nothing_is_left(tmp_path):
    marker = f"hg-hung-dumper-{os.getpid()}"
    fake = tmp_path / "bin" / "py-spy"
    fake.parent.mkdir()
    # exec keeps one process; the marker in its argv finds any copy left behind
    fake.write_text(f"#!/bin/bash\nexec -a {marker} sleep 300\n")
    fake.chmod(0o755)
    rank = rank_process()
    try:
        env = clean_env(PATH=f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
        started = time.monotonic()
        proc = subprocess.run([*distdoctor_argv(), "hang", "--json", "--pids", str(rank.pid), "--timeout", "4"],
                              env=env, capture_output=True, text=True, timeout=60)
        took = time.monotonic() - started
        report = load_report(proc.stdout)
    finally:
        rank.kill()
        rank.wait(5)
    assert took < 8, took
    stack = findings(report, "hang.stacks")
    assert any(f"(pid {rank.pid})" in f["summary"] and "gave no stack in time" in f["summary"] for f in stack), stack
    time.sleep(0.5)
    left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
    assert left == [], f"stand-in dumper still running: {left}"


def test_ptrace_refused_names_the_reason_and_the_fix(tmp_path):
    """The rank runs as uid 65534; distdoctor as root without CAP_SYS_PTRACE (a container's
    default): py-spy is refused, and the report says why and how to allow it."""
    if os.geteuid() != 0 or not shutil.which("setpriv") or not os.path.exists("/usr/bin/python3"):
        pytest.skip("needs root, setpriv and /usr/bin/python3")
    rank = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c",
                             RANK_CODE], env=clean_env(RANK="0", WORLD_SIZE="1"), start_new_session=True)
    try:
        time.sleep(0.5)
        argv = ["setpriv", "--inh-caps=-sys_ptrace", "--bounding-set=-sys_ptrace",
                *distdoctor_argv(), "hang", "--json", "--pids", str(rank.pid), "--timeout", "6"]
        proc = subprocess.run(argv, env=clean_env(), capture_output=True, text=True, timeout=60)
    finally:
        rank.kill()
        rank.wait(5)
    report = load_report(proc.stdout)
    stack = findings(report, "hang.stacks")
    assert proc.returncode == 1, stack
    (f,) = [f for f in stack if f["evidence"].get("pid") == rank.pid]
    assert f["summary"].endswith("cannot be read: ptrace refused"), f
    assert "--cap-add SYS_PTRACE" in f["fix"], f["fix"]
    assert f["explanation"].startswith("the ranks run as uid 65534 and this process (uid 0) lacks CAP_SYS_PTRACE"), f


def test_a_rank_that_exits_while_it_is_read(tmp_path):
    """A py-spy wrapper that ends the rank (SIGKILL) and then runs the real py-spy on it: the
    rank is gone by the time it is read, which is what a rank exiting mid-read looks like."""
    real = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    if not os.path.exists(real):
        pytest.skip("py-spy is not installed")
    wrapper = tmp_path / "bin" / "py-spy"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/bash\nkill -9 "$3"\nsleep 0.2\nexec {real} "$@"\n')  # $3: the pid after dump --pid
    wrapper.chmod(0o755)
    rank = rank_process()
    try:
        env = clean_env(PATH=f"{wrapper.parent}{os.pathsep}{os.environ['PATH']}")
        proc = subprocess.run([*distdoctor_argv(), "hang", "--json", "--pids", str(rank.pid), "--timeout", "6"],
                              env=env, capture_output=True, text=True, timeout=60)
        report = load_report(proc.stdout)
    finally:
        if rank.poll() is None:
            rank.kill()
        rank.wait(5)
    assert proc.returncode == 1, proc.stderr
    stack = [f["summary"] for f in findings(report, "hang.stacks")]
    assert f"rank 0 on {report['host']} (pid {rank.pid}) exited while being read" in stack, stack
    state = [f["summary"] for f in findings(report, "hang.process-state")]
    assert f"rank 0 on {report['host']} (pid {rank.pid}) has exited (its process is gone)" in state, state
