"""Running distdoctor the way an attacker or a broken machine would meet it: a real subprocess
under an address-space limit, with a wall-clock bound, and the checks every hostile test makes
on what comes back (strict JSON, the documented exit code, no process left behind)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import textwrap
import time
import uuid
from dataclasses import dataclass

import psutil

from tests.conftest import distdoctor_argv

MEMORY_LIMIT = 2 * 1024 ** 3  # bytes of address space; distdoctor check needs a few hundred MB


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str
    elapsed: float


def _limit(memory: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    return apply


def dd(*args: str, env: dict | None = None, timeout: float = 60, memory: int = MEMORY_LIMIT,
       stdin=subprocess.DEVNULL, cwd=None, stdout_fd: int | None = None) -> Result:
    """distdoctor with args, under an address-space limit and a wall-clock bound; afterwards no
    process that inherited this run's environment (distdoctor, a pack's children, a tool's
    detached grandchildren) may remain. stdout_fd: distdoctor's stdout is that descriptor (a
    pipe nobody reads) instead of a captured pipe; Result.stdout is then ""."""
    marker = uuid.uuid4().hex
    full_env = dict(os.environ)
    full_env.pop("DISTDOCTOR_CHECKS_PATH", None)
    full_env["XDG_CONFIG_HOME"] = "/nonexistent-distdoctor-config"
    full_env[MARKER_VAR] = marker
    full_env.update(env or {})
    start = time.monotonic()
    try:
        proc = subprocess.run([*distdoctor_argv(), *args], stdout=subprocess.PIPE if stdout_fd is None else stdout_fd,
                              stderr=subprocess.PIPE, timeout=timeout, env=full_env,
                              check=False, preexec_fn=_limit(memory), stdin=stdin, cwd=cwd)
    finally:
        left = _wait_for_environment_gone(marker)
    assert not left, f"processes left behind: {left}"
    return Result(proc.returncode, (proc.stdout or b"").decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace"),
                  time.monotonic() - start)


MARKER_VAR = "DISTDOCTOR_HOSTILE_TEST"


def _with_environment(marker: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(MARKER_VAR) == marker:
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def _wait_for_environment_gone(marker: str, seconds: float = 3.0) -> list[str]:
    """Descriptions of the marked processes still alive after `seconds`, which are then killed."""
    deadline = time.monotonic() + seconds
    while True:
        found = _with_environment(marker)
        if not found or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    described = []
    for proc in found:
        try:
            described.append(f"{proc.pid} {' '.join(proc.cmdline())[:120]}")
            proc.kill()
        except psutil.Error:
            continue
    return described


def _reject(constant: str):
    raise ValueError(f"non-standard JSON constant {constant}")


def strict_json(text: str):
    """json.loads that refuses NaN and Infinity, as strict parsers (jq, Go, browsers) do."""
    return json.loads(text, parse_constant=_reject)


def leftovers(marker: str) -> list[psutil.Process]:
    """Processes whose command line holds marker (a unique string in each test's fake tools)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if any(marker in part for part in proc.info["cmdline"] or ()):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def reap(marker: str) -> None:
    for proc in leftovers(marker):
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass


def write_pack(directory, name: str, body: str):
    directory.mkdir(exist_ok=True)
    (directory / name).write_text(textwrap.dedent(body))
    return directory


QUICK_PACK = """
    from distdoctor.api import check, ok

    @check("hostile.quick", title="A check that finds nothing wrong")
    def quick(ctx):
        yield ok("fine")

    CHECKS = [quick]
"""
