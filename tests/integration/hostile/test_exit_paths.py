"""Every way distdoctor can end leaves no process behind and ends with its documented code:
checks that keep starting hung tools (which fork and setsid) while distdoctor exits, a second
SIGTERM or SIGINT 50 ms after the first, SIGHUP (report included), a reader that never reads
(`check --json | sleep 50`), `-o /dev/stderr`, and `nccl-test`/`log` output that cannot be
written. Real processes: distdoctor, fake tools, and the harness's sweep for anything that
carries the run's marker in its environment."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import textwrap
import time
import uuid

import pytest

from distdoctor import output
from distdoctor.model import EXIT_ERROR, EXIT_HANGUP, EXIT_INTERRUPTED, EXIT_OK, EXIT_OUTPUT, EXIT_TERMINATED
from tests.conftest import distdoctor_argv
from tests.harness.hostile import MARKER_VAR, _wait_for_environment_gone, dd, strict_json, write_pack

# A tool that hangs with a child in its group and a grandchild in a session of its own.
HUNG_TOOL = "#!/bin/sh\nsetsid sleep 3600 >/dev/null 2>&1 </dev/null &\nsleep 3600 &\nexec sleep 3600\n"

# Checks that start the hung tool again and again (as the built-in Slurm check does with a hung
# sinfo), so that starts are under way while distdoctor exits.
RESTARTING_PACK = """
    import os
    from distdoctor.api import check, ok

    def _keep_starting(ctx):
        while True:
            ctx.host.run([os.environ["HOSTILE_TOOL"]], timeout=0.3)

    @check("hostile.restart-a", title="Starts a hung tool again and again", timeout=1)
    def restart_a(ctx):
        _keep_starting(ctx)
        yield ok("never")

    @check("hostile.restart-b", title="Starts a hung tool again and again", timeout=1)
    def restart_b(ctx):
        _keep_starting(ctx)
        yield ok("never")

    @check("hostile.hung", title="Waits on one hung tool", timeout=60)
    def hung(ctx):
        open(os.environ["HOSTILE_STARTED"], "w").close()
        ctx.host.run([os.environ["HOSTILE_TOOL"]], timeout=3600)
        yield ok("never")

    CHECKS = [restart_a, restart_b, hung]
"""


@pytest.fixture
def pack(tmp_path):
    tool = tmp_path / "hung-tool"
    tool.write_text(HUNG_TOOL)
    tool.chmod(0o755)
    directory = write_pack(tmp_path / "pack", "restarting.py", RESTARTING_PACK)
    return directory, {"HOSTILE_TOOL": str(tool), "HOSTILE_STARTED": str(tmp_path / "started")}


@pytest.mark.parametrize("attempt", range(5))
def test_nothing_an_abandoned_check_starts_while_exiting_survives(pack, attempt):
    directory, env = pack
    result = dd("check", "--checks-dir", str(directory), "--only", "hostile.restart-*", "--timeout", "2",
                "--json", env=env, timeout=40)  # dd() asserts that no marked process is left
    assert result.returncode == EXIT_ERROR, result.stderr
    assert "Traceback" not in result.stderr
    checks = {c["id"]: c["status"] for c in strict_json(result.stdout)["checks"]}
    assert {k: v for k, v in checks.items() if k.startswith("hostile.")} == {"hostile.restart-a": "timeout",
                                                                            "hostile.restart-b": "timeout"}
    # On a loaded machine the 2 s bound can also end the loading of the pack, which says so.
    assert set(checks) - {"hostile.restart-a", "hostile.restart-b"} <= {"core.check-packs"}, checks


def _start(directory, env, *args):
    marker = uuid.uuid4().hex
    full_env = {**os.environ, "XDG_CONFIG_HOME": "/nonexistent-distdoctor-config", MARKER_VAR: marker, **env}
    full_env.pop("DISTDOCTOR_CHECKS_PATH", None)
    proc = subprocess.Popen([*distdoctor_argv(), "check", "--checks-dir", str(directory), "--only", "hostile.*",
                             "--timeout", "100", "--json", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=full_env)
    return proc, marker


def _wait_started(env, proc, seconds=30):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and proc.poll() is None:
        if os.path.exists(env["HOSTILE_STARTED"]):
            time.sleep(0.5)  # the tool and its setsid grandchild are up
            return
        time.sleep(0.05)
    raise AssertionError("the hung check never started")


@pytest.mark.parametrize("signum,code", [(signal.SIGTERM, EXIT_TERMINATED), (signal.SIGINT, EXIT_INTERRUPTED),
                                         (signal.SIGHUP, EXIT_HANGUP)])
@pytest.mark.parametrize("second", [False, True], ids=["one-signal", "second-after-50ms"])
def test_signals_end_the_run_with_their_code_and_kill_every_tool(pack, signum, code, second):
    directory, env = pack
    proc, marker = _start(directory, env)
    try:
        _wait_started(env, proc)
        sent = time.monotonic()
        proc.send_signal(signum)
        if second:
            time.sleep(0.05)
            proc.send_signal(signum)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        left = _wait_for_environment_gone(marker)
    assert not left, f"processes left behind: {left}"
    assert time.monotonic() - sent < 15
    assert proc.returncode == code, err.decode(errors="replace")
    assert b"Traceback" not in err
    if not second:  # one signal: the report of what finished, hostile.hung as ERROR
        checks = {c["id"]: c for c in strict_json(out.decode())["checks"]}
        assert checks["hostile.hung"]["status"] == "error"
        assert signal.Signals(signum).name in checks["hostile.hung"]["findings"][0]["summary"]


QUICK = """
    from distdoctor.api import check, ok

    @check("hostile.big", title="A report larger than a pipe's buffer")
    def big(ctx):
        for i in range(400):
            yield ok(f"finding {i} " + "x" * 200)

    CHECKS = [big]
"""


def test_a_reader_that_never_reads_is_given_up_on_within_the_documented_bound(tmp_path):
    """`check --json | sleep 50`: the pipe's reader lives and never reads."""
    directory = write_pack(tmp_path / "pack", "big.py", QUICK)
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, 1031, 4096)  # F_SETPIPE_SZ: one page, so the report cannot fit
    try:
        start = time.monotonic()
        result = dd("check", "--checks-dir", str(directory), "--only", "hostile.*", "--json", "-v",
                    stdout_fd=write_end, timeout=60)
        took = time.monotonic() - start
    finally:
        os.close(write_end)
        os.close(read_end)
    assert result.returncode == EXIT_OUTPUT, result.stderr
    assert took < output.WRITE_TIMEOUT + 20, took
    assert "did not take the report" in result.stderr


def test_output_to_dev_stderr_goes_to_stderr(tmp_path):
    directory = write_pack(tmp_path / "pack", "big.py", QUICK)
    result = dd("check", "--checks-dir", str(directory), "--only", "hostile.*", "--json", "-o", "/dev/stderr",
                timeout=60)
    assert result.returncode == EXIT_OK, result.stderr
    assert result.stdout == ""
    assert '"hostile.big"' in result.stderr
    result = dd("check", "--checks-dir", str(directory), "--only", "hostile.*", "--json", "-o", "/dev/stdout",
                timeout=60)
    assert strict_json(result.stdout)["checks"][0]["id"] == "hostile.big"


@pytest.mark.parametrize("where", ["missing/report.json", "a-directory", "dangling", "/dev/full"])
def test_nccl_test_output_that_cannot_be_written_is_exit_74(tmp_path, where):
    (tmp_path / "a-directory").mkdir()
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere" / "x")
    target = where if where.startswith("/") else str(tmp_path / where)
    result = dd("nccl-test", "--local", "2", "--timeout", "30", "-o", target, timeout=90)
    assert result.returncode == EXIT_OUTPUT, result.stdout + result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("where", ["/dev/full", "a-directory", "missing/report.txt"])
def test_log_output_that_cannot_be_written_is_exit_74(tmp_path, where):
    (tmp_path / "a-directory").mkdir()
    log = tmp_path / "job.out"
    log.write_text("NCCL WARN NET/Socket : peer 10.0.0.2<41235> closed connection\n")
    target = where if where.startswith("/") else str(tmp_path / where)
    result = dd("log", str(log), "-o", target, timeout=60)
    assert result.returncode == EXIT_OUTPUT, result.stdout + result.stderr
    assert "Traceback" not in result.stderr


def test_log_with_stdout_closed_is_exit_74(tmp_path):
    log = tmp_path / "job.out"
    log.write_text("hello\n")
    code = textwrap.dedent(f"""
        import os, subprocess, sys
        os.close(1)
        sys.exit(subprocess.run({[*distdoctor_argv(), "log", str(log)]!r}, stderr=subprocess.PIPE).returncode)
    """)
    proc = subprocess.run(["python3", "-c", code], capture_output=True, timeout=60, check=False)
    assert proc.returncode == EXIT_OUTPUT, proc.stderr.decode(errors="replace")
    assert b"Traceback" not in proc.stderr


def test_log_on_ctrl_c_is_exit_130():
    """stdin a pipe whose writer stays open and silent: log waits; Ctrl-C ends it."""
    proc = subprocess.Popen([*distdoctor_argv(), "log", "-"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        time.sleep(2)
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == EXIT_INTERRUPTED, err.decode(errors="replace")
    assert b"Traceback" not in err


def test_log_on_input_that_never_ends_stops_at_its_bound():
    read_end, write_end = os.pipe()
    try:
        result = dd("log", "-", "--timeout", "3", "--json", stdin=read_end, timeout=30)
    finally:
        os.close(read_end)
        os.close(write_end)
    assert result.elapsed < 15
    assert result.returncode == EXIT_ERROR, result.stderr
    runs = {c["id"]: c for c in strict_json(result.stdout)["checks"]}
    assert runs["log.input"]["status"] == "timeout"


def test_log_on_a_file_that_keeps_growing_ends_and_honours_max_bytes(tmp_path):
    log = tmp_path / "growing.out"
    log.write_bytes(b"x" * 4096 + b"\n")
    writer = subprocess.Popen(["sh", "-c", f"while :; do echo 'NCCL INFO still going' >> {log}; done"])
    try:
        time.sleep(0.5)
        result = dd("log", str(log), "--max-bytes", "64K", "--timeout", "60", "--json", timeout=90)
    finally:
        writer.kill()
        writer.wait()
    assert result.elapsed < 30
    report = strict_json(result.stdout)
    read = next(c for c in report["checks"] if c["id"] == "log.input")
    evidence = next(f["evidence"] for f in read["findings"] if f.get("evidence", {}).get("bytes") is not None)
    assert evidence["bytes"] <= 64 * 1024 + 64 * 1024  # head and tail of at most 64K, plus one block's slack
