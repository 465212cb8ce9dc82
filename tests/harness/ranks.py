"""Starting real nccl-test ranks for the integration tests, and always stopping them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from typing import Mapping, Sequence

import pytest

from tests.conftest import distdoctor_argv
from tests.harness.runprefix import free_port as _run_port

# Launcher variables of the shell running pytest (an srun or mpirun around CI) must not leak in.
_LAUNCHER = ("SLURM_", "OMPI_", "PMI_", "PMIX_", "TORCHELASTIC_", "MASTER_", "RANK", "LOCAL_RANK", "WORLD_SIZE",
             "LOCAL_WORLD_SIZE", "GROUP_RANK")


def require_torch() -> None:
    pytest.importorskip("torch")


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_LAUNCHER)}
    env.update(extra)
    return env


def free_port() -> int:
    return _run_port("127.0.0.1")


def rank_env(rank: int, world: int, port: int, addr: str = "127.0.0.1", **extra: str) -> dict[str, str]:
    return clean_env(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR=addr,
                     MASTER_PORT=str(port), **extra)


class Ranks:
    """Processes started with Popen in their own sessions; killed (by pid group) on exit."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []
        self.started = time.monotonic()

    def __enter__(self) -> "Ranks":
        return self

    def __exit__(self, *exc) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            proc.wait(10)
            for stream in (proc.stdout, proc.stderr):
                if stream:
                    stream.close()

    def start(self, args: Sequence[str], env: Mapping[str, str], prefix: Sequence[str] = ()) -> subprocess.Popen:
        proc = subprocess.Popen([*prefix, *distdoctor_argv(), "nccl-test", *args], env=dict(env),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.procs.append(proc)
        return proc

    def finish(self, timeout: float) -> list[tuple[int, str, str]]:
        """(returncode, stdout, stderr) of every process; fails the test if one outlives timeout."""
        out = []
        for proc in self.procs:
            try:
                stdout, stderr = proc.communicate(timeout=max(0.1, self.started + timeout - time.monotonic()))
            except subprocess.TimeoutExpired:
                pytest.fail(f"{proc.args} still running after {timeout} s")
            out.append((proc.returncode, stdout, stderr))
        return out


def report(stdout: str) -> dict:
    """The JSON report rank 0 printed, validated against docs/report.schema.json."""
    from tests.conftest import load_report

    try:
        return load_report(stdout)
    except json.JSONDecodeError:
        pytest.fail(f"not a JSON report: {stdout[-2000:]!r}")


def checks(doc: dict) -> dict[str, dict]:
    return {c["id"]: c for c in doc["checks"]}


def statuses(doc: dict) -> dict[str, str]:
    return {c["id"]: c["status"] for c in doc["checks"]}


def trouble(doc: dict) -> list[str]:
    """Every finding that is not ok, one line each: what an assertion on a report shows when it
    fails (the whole checks list is cut short by pytest's repr)."""
    return [f"{c['id']} {f['status']}: {f['summary']}" for c in doc.get("checks", [])
            for f in c.get("findings", []) if f.get("status") != "ok"]
