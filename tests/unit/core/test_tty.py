"""On a terminal: colour unless NO_COLOR, and the live progress goes to stderr only."""

import os
import pty
import re
import select
import subprocess
import time

from tests.conftest import distdoctor_argv

COLOUR = re.compile(r"\x1b\[[0-9;]*3[0-7](;[0-9]+)*m")


def run_in_pty(env_extra):
    master, slave = pty.openpty()
    env = dict(os.environ, TERM="xterm-256color", COLUMNS="80", **env_extra)
    env.pop("NO_COLOR", None) if "NO_COLOR" not in env_extra else None
    proc = subprocess.Popen([*distdoctor_argv(), "check", "--only", "host"], stdin=slave, stdout=slave,
                            stderr=slave, env=env, close_fds=True)
    os.close(slave)
    chunks = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    proc.wait(timeout=10)
    os.close(master)
    return b"".join(chunks).decode("utf-8", "replace")


def test_colour_on_a_terminal():
    out = run_in_pty({})
    assert "host.shm-size" in out
    assert COLOUR.search(out)


def test_no_color_is_honoured():
    out = run_in_pty({"NO_COLOR": "1"})
    assert "host.shm-size" in out
    assert not COLOUR.search(out)
