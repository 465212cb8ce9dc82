"""reaper.kill_all() called by a library user or a test (not the CLI's exit) kills what Host
started, but neither stops later starts nor touches the caller's own child processes: only the
CLI's exit closes the door and kills the run's children (tests/integration/hostile/
test_exit_paths.py)."""

from __future__ import annotations

import subprocess
import threading

from distdoctor import reaper
from distdoctor.host import Host


def test_kill_all_outside_the_cli_exit_leaves_the_callers_children_and_later_starts():
    own = subprocess.Popen(["sleep", "30"])
    try:
        reaper.kill_all()
        assert own.poll() is None  # the caller's child lives
        assert Host().run(["true"], timeout=10).returncode == 0
        box = {}
        worker = threading.Thread(target=lambda: box.update(r=Host().run(["true"], timeout=10)))
        worker.start()
        worker.join(20)
        assert box["r"].returncode == 0  # a thread may still start commands
    finally:
        own.kill()
        own.wait()
