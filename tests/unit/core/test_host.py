"""The real host seam: missing tools, hung commands, odd bytes, permission errors."""

import os
import stat
import time

from distdoctor.host import Host


def test_missing_tool_is_a_result():
    result = Host().run(["distdoctor-no-such-tool", "--x"], timeout=5)
    assert result.missing and result.returncode == 127
    assert "was not found on PATH" in result.describe()


def test_hung_command_and_its_children_are_killed_at_the_timeout(tmp_path):
    pidfile = tmp_path / "child.pid"
    script = tmp_path / "hang.sh"
    script.write_text(f"#!/bin/sh\nsleep 300 &\necho $! > {pidfile}\nwait\n")
    script.chmod(0o755)
    start = time.monotonic()
    result = Host().run([str(script)], timeout=0.5)
    assert result.timed_out and result.returncode is None
    assert time.monotonic() - start < 5
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        raise AssertionError("the hung command's child survived")
    assert "did not finish" in result.describe()


def test_non_utf8_output_is_decoded_not_fatal(tmp_path):
    script = tmp_path / "bytes.sh"
    script.write_text("#!/bin/sh\nprintf 'GPU0\\377\\376 X\\n'\n")
    script.chmod(0o755)
    result = Host().run([str(script)], timeout=5)
    assert result.ok and "GPU0" in result.stdout and "\ufffd" in result.stdout


def test_not_executable_is_permission_denied(tmp_path):
    script = tmp_path / "plain.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(stat.S_IRUSR | stat.S_IWUSR)
    result = Host().run([str(script)], timeout=5)
    assert result.returncode == 126 and not result.ok


def test_argv_is_never_interpreted_by_a_shell(tmp_path):
    marker = tmp_path / "pwned"
    result = Host().run(["echo", f"x; touch {marker}"], timeout=5)
    assert result.stdout.strip() == f"x; touch {marker}"
    assert not marker.exists()


def test_read_text_absent_is_none_and_resolve_times_out_cleanly():
    host = Host()
    assert host.read_text("/nonexistent/distdoctor") is None
    assert host.list_dir("/nonexistent/distdoctor") is None
    result = host.resolve("localhost", timeout=5)
    assert result.addresses and not result.error


def test_fake_host_answers_the_whole_protocol_without_the_real_machine():
    """FakeHost implements HostAPI itself: inheriting from Host let methods it forgot (pid,
    python_version, fan_out) answer from the real machine inside tests."""
    from distdoctor.host import Host, HostAPI
    from distdoctor.testing import FakeHost

    api = {name for name, value in vars(HostAPI).items() if callable(value) and not name.startswith("_")}
    assert api and not issubclass(FakeHost, Host)
    assert not api - set(vars(FakeHost)), "FakeHost lacks " + ", ".join(sorted(api - set(vars(FakeHost))))
    assert not api - {n for n in dir(Host) if not n.startswith("_")}
    fake = FakeHost(pid=7, python_version="3.10.1")
    assert (fake.pid(), fake.python_version()) == (7, "3.10.1")
