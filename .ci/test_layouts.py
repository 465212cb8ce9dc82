"""The quick start, for real: a fresh venv, `pip install .` (a wheel) or `pip install -e .`, then
`python3 -m distdoctor` from the clone (whose distdoctor/ shadows the installed package) and
`distdoctor` from anywhere. The built-in pack must load in every one of them, and no top-level
`checks` package may be installed."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile

import pytest
import quickstart  # .ci/quickstart.py: this file's folder is on sys.path (pytest's rootdir-less import)

# Run as its own pytest session (.ci/run), where the tests package is not importable.
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


BUILTIN_ID = "net.nccl-socket-interface"
# The installs run at the lowest CPU priority: .ci/run runs these tests beside the suite, whose
# timing bounds must not lose seconds to pip. distdoctor itself runs at the normal priority,
# since a pack that has not loaded within its bound is abandoned.
LOW = ["nice", "-n", "19"]
# .ci/run sets PIP_RETRIES=0 to fail over from the PyTorch index CI cannot reach; these installs
# never name that index, and one reset connection to PyPI (fetching setuptools for the build)
# failed a run: they get pip's own retries back.
PIP_RETRIES = {"PIP_RETRIES": "5"}


def _copy_tree(dest: str) -> str:
    clone = os.path.join(dest, "clone")
    ignore = shutil.ignore_patterns(".git", "build", "*.egg-info", "__pycache__", ".pytest_cache", ".hypothesis",
                                    ".ruff_cache", ".mypy_cache", ".venv")
    shutil.copytree(REPO, clone, ignore=ignore)
    return clone


def _run(argv: list[str], cwd: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PIP_RETRIES)
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
    done = _run([*LOW, python, "-m", "pip", "install", "-q", *target], cwd=clone, timeout=600)
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

    # Every data file ships: each command that reads one answers from the installed package, away from the clone.
    failing = os.path.join(elsewhere, "failed.log")
    with open(failing, "w", encoding="utf-8") as fh:
        fh.write("node5:240:240 [6] misc/socket.cc:533 NCCL WARN socketPollConnect: Connect to 10.0.0.4<56849> "
                 "returned 113(No route to host), retrying\n")
    log = _run([python, "-m", "distdoctor", "log", "--json", failing], cwd=elsewhere)
    assert log.returncode == 1 and "No route to host" in log.stdout, log.stdout[-2000:] + log.stderr[-2000:]
    for argv in (["health", "--dry-run", "--node", "layoutnode", "--only", "gpu.xid", "--format", "json"],
                 ["hang", "--json", "--timeout", "5"]):
        done = _run([python, "-m", "distdoctor", *argv], cwd=elsewhere)
        assert done.returncode in (0, 1) and "please report this" not in done.stderr, done.stderr[-2000:]

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


def test_the_readme_install_command_works_on_a_python_that_refuses_pip_install(workdir):
    """The README's install command, verbatim, from a clean copy, with `python3` being a
    Debian-style system Python whose pip refuses to install (PEP 668): the venv it makes is what
    works. (.ci/run runs the README's test command the same way, and the suite in its venv.)"""
    python3 = quickstart.managed_python()
    if python3 is None:
        pytest.skip("no python3 with an EXTERNALLY-MANAGED marker on this machine")
    shim = os.path.join(workdir, "managed-bin")
    os.makedirs(shim, exist_ok=True)
    os.symlink(python3, os.path.join(shim, "python3"))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(PIP_RETRIES)
    env["PATH"] = f"{shim}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

    def sh(command: str, cwd: str, timeout: float = 900) -> subprocess.CompletedProcess:
        # Normal priority, as distdoctor check runs within its bounds (see LOW).
        return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=timeout)

    install, test = quickstart.commands()
    quickstart.test_head(test)  # the test command ends with the suite, which .ci/run starts itself
    clone = _copy_tree(os.path.join(workdir, "quickstart"))
    refused = sh("python3 -m pip install .", clone)
    if "No module named pip" not in refused.stderr:
        # The machine the README was failing on: the system Python's pip says no.
        assert refused.returncode != 0 and "externally-managed-environment" in refused.stderr, refused.stderr[-2000:]

    done = sh(install, clone)
    assert done.returncode in (0, 1), done.stdout[-2000:] + done.stderr[-3000:]
    assert re.search(r"\d+ checks: \d+ ok", done.stdout), done.stdout[-2000:]
