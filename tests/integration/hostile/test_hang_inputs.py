"""`distdoctor hang` against what a hostile or broken node hands it, for real: a py-spy stand-in
that prints 100 MB, binary garbage, JSON nested 100,000 deep, a quarter of a million frames or a
20 MB error line; real ranks whose command line holds terminal escapes and newlines, whose
environment is near the kernel's 2 MB limit, or whose environment block has no NUL at all (the
rank overwrote it through /proc/self/mem). Each run ends within its bound and a memory limit,
prints strict JSON (and a console view with no raw control character), exits with the
documented code (1 when a finding is a FAIL, else 0), and leaves nothing running."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from tests.harness.hostile import dd, strict_json
from tests.harness.ranks import clean_env

MEMORY = 1 << 30  # address space for distdoctor: far below what 100 MB of JSON would cost parsed
RANK = "import sys, time\nwhile True: time.sleep(0.2)\n"

STANDINS = {
    "100 MB of text": "yes xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx | head -c 104857600",
    "binary garbage": "head -c 200000 /dev/urandom",
    "JSON nested 100,000 deep": (f"{sys.executable} -c \"import sys; sys.stdout.write('[' * 100000 + ']' * 100000)\""),
    "250,000 frames": (f"{sys.executable} -c \"import json, sys; f={{'name': 'f' * 20, 'filename': '/x.py', 'line': 1}}; "
                       "json.dump([{'thread_name': 'main', 'os_thread_id': 1, 'active': True, 'frames': [f] * 250000}], "
                       "sys.stdout)\""),
    "a 20 MB error line": "head -c 20000000 /dev/zero | tr '\\\\0' E >&2; exit 1",
    "names that are not text": (f"{sys.executable} -c \"import json, sys; json.dump([{{'thread_name': [1] * 9, "
                                "'frames': [{'name': {'a': 1}, 'filename': None, 'line': 'x'}], 'active': 'yes'}], "
                                "sys.stdout)\""),
}


def rank_process(*argv: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", RANK, *argv], env=clean_env(RANK="0", WORLD_SIZE="1", **(env or {})),
                            start_new_session=True)


def stop(rank: subprocess.Popen) -> None:
    if rank.poll() is None:
        rank.kill()
    rank.wait(5)


def judged(result, pid: int) -> dict:
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    report = strict_json(result.stdout)
    fails = [f for c in report["checks"] for f in c["findings"] if f["status"] == "fail"]
    assert result.returncode == (1 if fails else 0), (result.returncode, fails)
    assert len(result.stdout) < 4 << 20, len(result.stdout)  # no 100 MB echoed into the report
    assert {"hang.ranks", "hang.stacks"} <= {c["id"] for c in report["checks"]}, report["checks"]
    return report


@pytest.mark.parametrize("name", list(STANDINS))
def test_a_py_spy_that_prints_anything_gives_a_finding_within_the_bound(tmp_path, name):
    fake = tmp_path / "bin" / "py-spy"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/bash\n{STANDINS[name]}\n")
    fake.chmod(0o755)
    rank = rank_process()
    try:
        result = dd("hang", "--json", "--pids", str(rank.pid), "--timeout", "10", timeout=60, memory=MEMORY,
                    env={"PATH": f"{fake.parent}{os.pathsep}{os.environ['PATH']}"})
    finally:
        stop(rank)
    assert result.elapsed < 20, result.elapsed
    report = judged(result, rank.pid)
    stacks = next(c for c in report["checks"] if c["id"] == "hang.stacks")
    said = " | ".join(f["summary"] + " " + str(f.get("explanation", "")) for f in stacks["findings"])
    assert len(said) < 20000, len(said)


CONTROL = "\x1b]0;owned\x07\x1b[2J\x1b[31mred\nsecond line\rback\x00"


@pytest.mark.parametrize("case", ["control characters in argv", "an environment near 2 MB", "an environment with no NUL"])
def test_a_rank_s_hostile_proc_entries_are_read_and_shown_safely(case):
    argv: tuple[str, ...] = ()
    env: dict = {}
    code = RANK
    if case == "control characters in argv":
        argv = (CONTROL.replace("\x00", ""), "x" * 60000)
    elif case == "an environment near 2 MB":
        env = {f"BIG_{i}": "v" * 120_000 for i in range(14)}
    else:
        # The rank writes over its own environment block: /proc/PID/environ then reads one string
        # with no NUL, starting with RANK=0 and going on with bytes that are not text.
        code = ("import time\nfields = open('/proc/self/stat').read().rsplit(')', 1)[1].split()\n"
                "start, end = int(fields[-3]), int(fields[-2])\n"
                "with open('/proc/self/mem', 'r+b', buffering=0) as mem:\n"
                "    mem.seek(start); mem.write(b'RANK=0' + b'\\xff\\x1b' * ((end - start - 6) // 2))\n"
                "print('ready', flush=True)\nwhile True: time.sleep(0.2)\n")
    rank = subprocess.Popen([sys.executable, "-c", code, *argv], env=clean_env(RANK="0", WORLD_SIZE="1", **env),
                            start_new_session=True, stdout=subprocess.PIPE, text=True)
    try:
        if case == "an environment with no NUL":
            assert rank.stdout is not None and rank.stdout.readline().strip() == "ready"
            raw = open(f"/proc/{rank.pid}/environ", "rb").read()
            assert b"\0" not in raw[:-1] and raw.startswith(b"RANK=0"), raw[:40]
        time.sleep(0.3)
        result = dd("hang", "--json", "--pids", str(rank.pid), "--timeout", "8", timeout=60, memory=MEMORY)
        console = dd("hang", "--pids", str(rank.pid), "--timeout", "8", timeout=60, memory=MEMORY)
    finally:
        stop(rank)
    assert result.elapsed < 20 and console.elapsed < 20
    judged(result, rank.pid)
    assert "Traceback" not in console.stderr, console.stderr[-3000:]
    for char in ("\x1b", "\x07", "\r", "\x00"):
        assert char not in console.stdout, (char, console.stdout[:2000])
    json.dumps(result.stdout)
