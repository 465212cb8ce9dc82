"""SIGINT and SIGTERM during `distdoctor check` end with the report of what finished and the
documented exit code, never a traceback; an ASCII-only stdout does not crash the console."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from distdoctor.model import EXIT_INTERRUPTED, EXIT_OK, EXIT_TERMINATED
from tests.conftest import distdoctor_argv
from tests.harness.hostile import QUICK_PACK, dd, strict_json, write_pack


SLOW_PACK = """
    import os
    import time
    from distdoctor.api import check, ok

    @check("hostile.slow", title="A check that takes a minute", timeout=120)
    def slow(ctx):
        open(os.environ["HOSTILE_STARTED"], "w").close()
        time.sleep(60)
        yield ok("done")

    CHECKS = [slow]
"""

# Says when its import has begun (the same marker as the slow check), so the test signals as
# soon as the packs are loading instead of after a guessed pause.
HANG_AT_IMPORT = "import os, time\nopen(os.environ['HOSTILE_STARTED'], 'w').close()\ntime.sleep(60)\nCHECKS = []\n"


def start(tmp_path, *extra_files):
    pack = write_pack(tmp_path / "pack", "quick.py", QUICK_PACK)
    for name, body in extra_files:
        write_pack(pack, name, body)
    env = {**os.environ, "XDG_CONFIG_HOME": "/nonexistent-distdoctor-config",
           "HOSTILE_STARTED": str(tmp_path / "started")}
    return subprocess.Popen([*distdoctor_argv(), "check", "--checks-dir", str(pack), "--only", "hostile.*",
                             "--format", "json", "--timeout", "100", "--jobs", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)


def wait_for_slow_check(tmp_path, seconds=30):
    """--jobs 1 runs hostile.quick before hostile.slow: once slow has started, quick is done."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if (tmp_path / "started").exists():
            return
        time.sleep(0.1)
    raise AssertionError("the slow check never started")


@pytest.mark.parametrize("signum,code", [(signal.SIGINT, EXIT_INTERRUPTED), (signal.SIGTERM, EXIT_TERMINATED)])
def test_a_signal_during_the_checks_gives_the_partial_report_and_its_code(tmp_path, signum, code):
    proc = start(tmp_path, ("slow.py", SLOW_PACK))
    try:
        wait_for_slow_check(tmp_path)
        sent = time.monotonic()
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert time.monotonic() - sent < 10
    assert proc.returncode == code, err.decode()
    assert b"Traceback" not in err
    checks = {c["id"]: c for c in strict_json(out.decode())["checks"]}
    assert checks["hostile.quick"]["status"] == "ok"
    assert checks["hostile.slow"]["status"] == "error"
    assert signal.Signals(signum).name in checks["hostile.slow"]["findings"][0]["summary"]


def test_a_signal_while_packs_load_exits_cleanly_with_its_code(tmp_path):
    proc = start(tmp_path, ("hang.py", HANG_AT_IMPORT))
    try:
        wait_for_slow_check(tmp_path)  # hang.py is being imported
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == EXIT_INTERRUPTED
    assert b"Traceback" not in err and b"interrupted by SIGINT" in err
    assert out == b""


def test_ascii_only_stdout_does_not_crash_the_console(tmp_path):
    pack = write_pack(tmp_path / "pack", "unicode.py", """
        from distdoctor.api import check, warn

        @check("hostile.unicode", title="Ünïcödé — title ✓")
        def unicode(ctx):
            yield warn("GPU “0” → ½ speed ✗ \\udcff", fix="echo ✓")

        CHECKS = [unicode]
    """)
    for fmt in ("console", "json", "prometheus"):
        result = dd("check", "--checks-dir", str(pack), "--only", "hostile.*", "--format", fmt, "-v",
                    env={"PYTHONIOENCODING": "ascii"}, timeout=60)
        assert result.returncode == EXIT_OK, result.stderr
        assert "Traceback" not in result.stderr
        assert "hostile.unicode" in result.stdout or "speed" in result.stdout
