"""`distdoctor check` never imports torch (seconds of start-up, and a CUDA init on some
machines): torch is imported inside nccl-test's code paths only."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO

# The one module that needs torch at import time (it subclasses torch.distributed.Store), and
# which nccl-test's session imports inside a function.
TORCH_MODULES = {"distdoctor.nccltest.store_torch"}

_EVERY_MODULE = """
import importlib, pkgutil, sys
import distdoctor, distdoctor.checks
skip = set(sys.argv[1].split(","))
for package in (distdoctor, distdoctor.checks):
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        if info.name not in skip and not info.name.endswith(".__main__"):
            importlib.import_module(info.name)
print("torch" in sys.modules)
"""

_CHECK = """
import sys
from distdoctor import cli
try:
    cli.main(["check", "--format", "json", "-o", "/dev/null"])
except SystemExit:
    pass
print("torch" in sys.modules, file=sys.stderr)
"""


def test_no_module_but_the_store_adapter_imports_torch():
    done = subprocess.run([sys.executable, "-c", _EVERY_MODULE, ",".join(TORCH_MODULES)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["False"], done.stdout


def test_a_whole_check_run_does_not_import_torch():
    done = subprocess.run([sys.executable, "-c", _CHECK], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.stderr.strip().splitlines()[-1] == "False", done.stderr[-3000:]


def test_the_store_adapter_is_the_module_that_imports_torch():
    """The test above would pass with an empty TORCH_MODULES if nothing imported torch: show the
    walk sees a module that does."""
    done = subprocess.run([sys.executable, "-c", _EVERY_MODULE, ""], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert done.stdout.split() == ["True"], done.stdout + done.stderr[-2000:]
