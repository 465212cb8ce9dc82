"""`distdoctor log` on a big plain file searched by several greps at once (logs/search.py): at
Ctrl-C and at its --timeout every grep ends with it. The file is 80 MiB where every line
matches, so the scan (every line parsed) outlasts the signal and the bound by far."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid

import psutil
import pytest

from distdoctor.model import EXIT_ERROR, EXIT_INTERRUPTED
from tests.conftest import distdoctor_argv
from tests.harness.hostile import MARKER_VAR, _wait_for_environment_gone, _with_environment, dd, strict_json

LINE = (b"17: 2024-05-01T12:00:09.5 gpu003:20017:20058 [1] NCCL WARN socketPollConnect: Connect to "
        b"10.1.3.12<43211> returned 113(No route to host)\n")


@pytest.fixture(scope="module")
def big_log(tmp_path_factory):
    path = tmp_path_factory.mktemp("split") / "warn.out"
    chunk = LINE * (2**20 // len(LINE))
    with open(path, "wb") as fh:
        for _ in range(80):
            fh.write(chunk)
    yield str(path)
    os.unlink(path)


def _greps(marker: str) -> list[psutil.Process]:
    found = []
    for p in _with_environment(marker):
        try:
            if p.name() == "grep":
                found.append(p)
        except psutil.Error:
            continue  # it ended meanwhile
    return found


def test_ctrl_c_ends_every_grep(big_log):
    marker = uuid.uuid4().hex
    proc = subprocess.Popen([*distdoctor_argv(), "log", big_log], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, MARKER_VAR: marker})
    try:
        deadline = time.monotonic() + 30
        while len(_greps(marker)) < 2 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        greps = _greps(marker)
        assert len(greps) >= 2, "the file was not searched by several greps at once"
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        left = _wait_for_environment_gone(marker)
    assert proc.returncode == EXIT_INTERRUPTED, err.decode(errors="replace")
    assert not left, f"left running: {left}"
    assert b"Traceback" not in err


def test_the_time_bound_ends_every_grep(big_log):
    # dd() asserts that nothing it started (the greps included) outlives it
    result = dd("log", big_log, "--timeout", "2", "--json", timeout=60)
    assert result.returncode == EXIT_ERROR, result.stderr
    runs = {c["id"]: c for c in strict_json(result.stdout)["checks"]}
    assert runs["log.input"]["status"] == "timeout"
    assert result.elapsed < 20
