"""The quick start, for real: a fresh venv, `pip install .` (a wheel) or `pip install -e .`, then
`python3 -m distdoctor` from the clone (whose distdoctor/ shadows the installed package) and
`distdoctor` from anywhere. The built-in pack must load in every one of them, and no top-level
`checks` package may be installed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from tests.conftest import REPO


BUILTIN_ID = "net.nccl-socket-interface"


def _copy_tree(dest: str) -> str:
    clone = os.path.join(dest, "clone")
    ignore = shutil.ignore_patterns(".git", "build", "*.egg-info", "__pycache__", ".pytest_cache",
                                    ".ruff_cache", ".mypy_cache")
    shutil.copytree(REPO, clone, ignore=ignore)
    return clone


def _run(argv: list[str], cwd: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def workdir():
    path = tempfile.mkdtemp(prefix="distdoctor-layouts-")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _venv(workdir: str, name: str, clone: str, editable: bool) -> str:
    venv = os.path.join(workdir, name)
    # No system site-packages: the machine's own distdoctor must not be what answers.
    subprocess.run([sys.executable, "-m", "venv", venv], check=True, timeout=120)
    python = os.path.join(venv, "bin", "python")
    target = ["-e", "."] if editable else ["."]
    done = _run([python, "-m", "pip", "install", "-q", *target], cwd=clone, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return venv


def _assert_full_pack(done: subprocess.CompletedProcess) -> None:
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert BUILTIN_ID in done.stdout
    assert "failed to load" not in done.stderr


@pytest.mark.parametrize("editable", [False, True], ids=["wheel", "editable"])
def test_builtin_pack_loads_in_every_layout(workdir, editable):
    clone = _copy_tree(os.path.join(workdir, "editable" if editable else "wheel"))
    venv = _venv(workdir, f"venv-{'editable' if editable else 'wheel'}", clone, editable)
    python = os.path.join(venv, "bin", "python")
    elsewhere = tempfile.mkdtemp(dir=workdir)

    # The README's quick start, from the clone: the clone's distdoctor/ is the one imported.
    from_clone = _run([python, "-m", "distdoctor", "list"], cwd=clone)
    _assert_full_pack(from_clone)
    _assert_full_pack(_run([python, "-m", "distdoctor", "list"], cwd=elsewhere))
    _assert_full_pack(_run([os.path.join(venv, "bin", "distdoctor"), "list"], cwd=elsewhere))
    check = _run([python, "-m", "distdoctor", "check", "--only", "host", "--format", "json"], cwd=clone)
    assert check.returncode in (0, 1), check.stderr
    assert '"core.check-packs"' not in check.stdout

    # The documented way to regenerate the reference must not write an empty file.
    docgen = _run([python, "-m", "distdoctor.docgen"], cwd=clone)
    assert docgen.returncode == 0, docgen.stderr
    assert f"### `{BUILTIN_ID}`" in docgen.stdout
    with open(os.path.join(REPO, "docs", "checks.md"), encoding="utf-8") as fh:
        assert docgen.stdout == fh.read()

    # Every check module ships with it.
    shipped = _run([python, "-c", "import distdoctor.checks as c; print(len(c.CHECKS) == len(c._from_modules()))"],
                   cwd=elsewhere)
    assert shipped.stdout.split() == ["True"], shipped.stderr

    # The pack ships as distdoctor.checks only.
    top = _run([python, "-c", "import checks"], cwd=elsewhere)
    assert top.returncode != 0 and "No module named 'checks'" in top.stderr


def test_a_clone_that_is_not_installed_still_finds_its_pack(monkeypatch):
    """No distribution metadata at all (the clone on PYTHONPATH): the pack beside the package
    is loaded under its installed name."""
    from distdoctor import entrypoints, registry

    monkeypatch.setattr(entrypoints, "_from_metadata", lambda group: [])
    loaded = registry.load(env={})
    assert BUILTIN_ID in loaded.checks and not loaded.problems
    assert loaded.checks[BUILTIN_ID].source == "entry point builtin (distdoctor.checks)"
