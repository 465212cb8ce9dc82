"""What a first-time user sees from nccl-test: a clean log without numpy, and an install hint
that works as printed."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile


from tests.conftest import distdoctor_argv
from tests.harness.ranks import clean_env, report, require_torch

# Each test starts its own ranks on leased ports and builds nothing shared: the torch workers
# take them one by one (tests/harness/groups.py), so that no worker runs this whole file.
SPREAD_OVER_WORKERS = True


def test_no_numpy_warning_on_any_rank_when_numpy_is_missing():
    require_torch()
    with tempfile.TemporaryDirectory() as hide:
        # A numpy that fails to import as a missing one does: torch warns on import then.
        os.mkdir(os.path.join(hide, "numpy"))
        with open(os.path.join(hide, "numpy", "__init__.py"), "w") as fh:
            fh.write("raise ModuleNotFoundError(\"No module named 'numpy'\", name='numpy')\n")
        env = clean_env(PYTHONPATH=hide + os.pathsep + os.environ.get("PYTHONPATH", ""))
        probe = subprocess.run([sys.executable, "-c", "import torch"], env=env, capture_output=True,
                               text=True, timeout=120)
        assert "Failed to initialize NumPy" in probe.stderr  # the hiding works: the test can fail
        proc = subprocess.run([*distdoctor_argv(), "nccl-test", "--local", "2", "--timeout", "60", "--json"],
                              env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert report(proc.stdout)["status"] == "ok"
    assert "NumPy" not in proc.stderr and "numpy" not in proc.stderr


def test_install_hint_is_a_command_that_works_as_printed():
    from distdoctor.nccltest import INSTALL_HINT

    hint = INSTALL_HINT.format(python="/opt/venv/bin/python3")
    assert "distdoctor[torch]" not in hint  # not on an index: cannot work
    assert "/opt/venv/bin/python3 -m pip install torch\n" in hint
    assert "--index-url https://download.pytorch.org/whl/cpu" in hint


def test_nccl_test_has_the_output_options_of_check(tmp_path):
    require_torch()
    out = tmp_path / "nccl.prom"
    proc = subprocess.run([*distdoctor_argv(), "nccl-test", "--local", "2", "--timeout", "60", "--format", "prometheus",
                           "-o", str(out)], env=clean_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    text = out.read_text()
    assert 'check="nccl-test.all-reduce"' in text and "# TYPE" in text
    console = tmp_path / "nccl.txt"
    proc = subprocess.run([*distdoctor_argv(), "nccl-test", "--local", "2", "--timeout", "60", "-o", str(console)],
                          env=clean_env(NO_COLOR=""), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    text = console.read_text()
    assert "nccl-test.all-reduce" in text and "\x1b[" not in text
    assert not [line for line in text.splitlines() if line != line.rstrip()]
    refused = subprocess.run([*distdoctor_argv(), "nccl-test", "--local", "2", "-o", str(tmp_path / "no" / "x")],
                             env=clean_env(), capture_output=True, text=True, timeout=60)
    assert refused.returncode == 74 and "does not exist" in refused.stderr  # as check: the report cannot be written
