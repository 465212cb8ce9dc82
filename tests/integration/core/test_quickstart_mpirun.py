"""The docs' `mpirun ... distdoctor check` lines run as printed, as root too (Open MPI refuses
root unless told, which a container user meets first)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess

import pytest

from tests.conftest import REPO, distdoctor_argv
from tests.harness.ranks import clean_env



def _documented_mpirun_lines() -> list[str]:
    text = open(os.path.join(REPO, "docs", "getting-started.md"), encoding="utf-8").read()
    return [m.group(1) for m in re.finditer(r"^\$ (.*\bmpirun\b.*distdoctor check.*)$", text, re.M)]


def _argv_env(line: str) -> tuple[list[str], dict[str, str]]:
    words = shlex.split(line, comments=True)
    env = clean_env()
    while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
        key, _, value = words.pop(0).partition("=")
        env[key] = value
    at = words.index("distdoctor")
    return words[:at] + distdoctor_argv() + words[at + 1:] + ["--only", "host"], env


def test_documented_mpirun_commands_work_as_root():
    if shutil.which("mpirun") is None:
        pytest.skip("no mpirun")
    if os.geteuid() != 0:
        pytest.skip("the refusal is only for root")
    lines = _documented_mpirun_lines()
    assert any("--allow-run-as-root" in line for line in lines), lines
    plain = subprocess.run(["mpirun", "-np", "1", "true"], env=clean_env(), capture_output=True, text=True,
                           timeout=60)
    if plain.returncode == 0:
        pytest.skip("this mpirun does not refuse root (not Open MPI)")
    for line in lines:
        if "--allow-run-as-root" not in line and "OMPI_ALLOW_RUN_AS_ROOT=1" not in line:
            continue
        argv, env = _argv_env(line)
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode in (0, 1), (line, proc.stderr[-2000:])
        # Under a launcher rank 0 prints one report for the job (its header names the world).
        assert "rank 0 of 2" in proc.stdout and " checks: " in proc.stdout, (line, proc.stdout[-2000:])
