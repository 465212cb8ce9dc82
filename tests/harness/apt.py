"""Install the Debian packages an integration test needs: idempotent, serialized, fast when
everything is already there (dpkg-query answers in milliseconds)."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess

import pytest

_LOCK = "/tmp/distdoctor-tests-apt.lock"
_updated = False


def missing(packages: list[str]) -> list[str]:
    result = subprocess.run(["dpkg-query", "-W", "-f=${Package} ${Status}\n", *packages],
                            capture_output=True, text=True, timeout=30)
    installed = {line.split()[0] for line in result.stdout.splitlines() if line.endswith("install ok installed")}
    return [p for p in packages if p not in installed]


def ensure(*packages: str) -> None:
    """apt-get install the packages not yet installed, or skip the test when that is
    impossible (not root, no apt). CI runs as root, so there it installs."""
    global _updated
    if not shutil.which("dpkg-query"):
        pytest.skip("not a Debian system: cannot install " + " ".join(packages))
    todo = missing(list(packages))
    if not todo:
        return
    if os.geteuid() != 0:
        pytest.skip(f"needs root to install {' '.join(todo)}")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    with open(_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        todo = missing(todo)
        if not todo:
            return
        if not _updated:
            subprocess.run(["apt-get", "update", "-q"], check=True, capture_output=True, timeout=600, env=env)
            _updated = True
        proc = subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends", *todo],
                              capture_output=True, text=True, timeout=900, env=env)
        if proc.returncode != 0:
            raise RuntimeError(f"apt-get install {' '.join(todo)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
