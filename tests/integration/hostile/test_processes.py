"""Fake tools that hang, fork, detach with setsid, flood stdout and print binary: Host.run and
the CLI bound each, kill the whole tree at its timeout and at exit, and keep memory bounded."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap
import time

import pytest

from distdoctor.model import EXIT_ERROR
from tests.harness.hostile import (
    MEMORY_LIMIT,
    _limit,
    dd,
    leftovers,
    reap,
    strict_json,
    write_pack,
)



@pytest.fixture
def marker():
    """A unique `sleep` argument: every process of the test's fake tools carries it in argv."""
    mark = f"3600.{random.randrange(10**8, 10**9)}"
    yield mark
    reap(mark)


def tool(directory, name, body):
    path = directory / name
    path.write_text("#!/bin/sh\n" + textwrap.dedent(body))
    path.chmod(0o755)
    return str(path)


TOOLS = {
    # name: (script, how Host.run must end)
    "hangs": ("exec sleep {m}\n", "timeout"),
    "forks-and-hangs": ("sleep {m} &\nsleep {m}\n", "timeout"),
    "setsid-and-hangs": ("setsid sleep {m} >/dev/null 2>&1 </dev/null &\nsleep {m}\n", "timeout"),
    "double-forks-and-exits": ("( setsid sleep {m} >/dev/null 2>&1 </dev/null & )\necho started\nexit 0\n", "exited"),
    "detached-holds-stdout": ("setsid sleep {m} &\necho started\nexit 0\n", "timeout"),
    "floods": ("exec yes {m}\n", "flooded"),
    "binary": ("head -c 3000000 /dev/urandom\nexit 0\n", "exited"),
}


def run_in_child(path, timeout):
    """Host.run in a separate interpreter (under a memory limit), which then exits: what it
    leaves behind is then visible."""
    code = textwrap.dedent(f"""
        import json, sys, time
        from distdoctor.host import Host
        start = time.monotonic()
        r = Host().run([{path!r}], timeout={timeout})
        print(json.dumps({{"rc": r.returncode, "timed_out": r.timed_out, "error": r.error,
                          "stdout": len(r.stdout), "took": time.monotonic() - start}}))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout + 30,
                          preexec_fn=_limit(MEMORY_LIMIT), check=False)
    assert proc.returncode == 0, proc.stderr
    return strict_json(proc.stdout)


@pytest.mark.parametrize("name", sorted(TOOLS))
def test_host_run_bounds_the_tool_and_leaves_nothing_behind(tmp_path, marker, name):
    script, how = TOOLS[name]
    path = tool(tmp_path, name, script.format(m=marker))
    result = run_in_child(path, timeout=3)
    assert result["took"] < 3 + 5
    if how == "timeout":
        assert result["timed_out"] and result["rc"] is None
    elif how == "flooded":
        assert result["rc"] is None and "MiB" in result["error"] and result["stdout"] <= 16 * 1024 * 1024
    else:
        assert result["rc"] == 0 and not result["timed_out"]
    time.sleep(0.5)
    assert leftovers(marker) == [], f"{name} left processes behind"


def test_a_tool_still_running_when_the_check_is_abandoned_dies_with_distdoctor(tmp_path, marker):
    path = tool(tmp_path, "hangs", f"setsid sleep {marker} >/dev/null 2>&1 </dev/null &\nsleep {marker}\n")
    pack = write_pack(tmp_path / "pack", "hung.py", f"""
        from distdoctor.api import check, ok

        @check("hostile.hung-tool", title="A check whose tool hangs", timeout=2)
        def hung_tool(ctx):
            ctx.facts.host.run([{path!r}], timeout=600)
            yield ok("never")

        CHECKS = [hung_tool]
    """)
    result = dd("check", "--checks-dir", str(pack), "--only", "hostile.*", "--format", "json", "--timeout", "10",
                timeout=40)
    assert result.elapsed < 10 + 10
    assert result.returncode == EXIT_ERROR
    doc = strict_json(result.stdout)
    assert doc["checks"][0]["status"] == "timeout"
    time.sleep(0.5)
    assert leftovers(marker) == []


def test_leftover_detection_sees_a_detached_process(tmp_path, marker):
    """The suite's own check can fail: a process detached outside distdoctor is found."""
    subprocess.Popen(["setsid", "sleep", marker], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     start_new_session=True)
    deadline = time.monotonic() + 5
    while not leftovers(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert leftovers(marker)
    assert os.getpid()  # reap() in the fixture kills it


def test_the_exit_sweep_survives_an_unreadable_proc(monkeypatch):
    """At exit the sweep lists /proc; a listing that fails (EBADF from a descriptor another
    thread closed, EMFILE, no /proc) must not turn a finished run into a traceback."""
    import psutil

    from distdoctor import reaper

    def broken():
        raise OSError(9, "Bad file descriptor", "/proc")
        yield  # a generator, as psutil's is

    monkeypatch.setattr(psutil, "process_iter", broken)
    assert reaper._sweep({"some-token"}) == 0
    with reaper._lock:
        reaper._tokens.add("some-token")
    try:
        reaper.kill_all()
    finally:
        with reaper._lock:
            reaper._tokens.discard("some-token")
