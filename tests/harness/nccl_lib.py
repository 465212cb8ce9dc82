"""The real NCCL library, from the pinned wheel, for tests that need NCCL's own answers
(ncclGetVersion, ncclGetUniqueId's interface choice) without a GPU.

Only libnccl.so.2 is extracted from the 206 MB wheel, and it is cached between runs under
~/.cache/distdoctor-tests (or $DISTDOCTOR_TEST_CACHE)."""

from __future__ import annotations

import fcntl
import glob
import os
import subprocess
import sys
import tempfile
import zipfile

import pytest

PACKAGE = "nvidia-nccl-cu13"
VERSION = "2.30.7"
VERSION_CODE = 23007


def cache_dir() -> str:
    base = os.environ.get("DISTDOCTOR_TEST_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "distdoctor-tests")
    os.makedirs(base, exist_ok=True)
    return base


def libnccl() -> str:
    """Path to libnccl.so.2 of nvidia-nccl-cu13==2.30.7, downloading the wheel once."""
    target_dir = os.path.join(cache_dir(), f"nccl-{VERSION}")
    target = os.path.join(target_dir, "libnccl.so.2")
    if os.path.exists(target):
        return target
    os.makedirs(target_dir, exist_ok=True)
    with open(os.path.join(cache_dir(), "nccl.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(target):
            return target
        with tempfile.TemporaryDirectory() as tmp:
            proc = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", tmp,
                                   f"{PACKAGE}=={VERSION}"], capture_output=True, text=True, timeout=600)
            wheels = glob.glob(os.path.join(tmp, "*.whl"))
            if proc.returncode != 0 or not wheels:
                pytest.skip(f"cannot download {PACKAGE}=={VERSION}: {proc.stderr[-500:]}")
            with zipfile.ZipFile(wheels[0]) as wheel:
                member = next(n for n in wheel.namelist() if n.endswith("lib/libnccl.so.2"))
                partial = target + ".part"
                with wheel.open(member) as src, open(partial, "wb") as dst:
                    while chunk := src.read(1 << 20):
                        dst.write(chunk)
                os.replace(partial, target)
    return target
