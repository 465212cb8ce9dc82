import subprocess

from distdoctor.model import Status
from distdoctor.testing import FakeHost, run_check
from distdoctor.checks import host as host_checks

from tests.conftest import distdoctor_argv


def test_shm_warns_on_docker_default():
    host = FakeHost(disk={"/dev/shm": (64 * 1024 * 1024, 0, 64 * 1024 * 1024)})
    findings = run_check(host_checks.shm_size, host)
    assert [f.status for f in findings] == [Status.WARN]
    assert "--shm-size" in findings[0].fix


def test_cli_runs():
    proc = subprocess.run([*distdoctor_argv(), "check", "--only", "host"], capture_output=True, text=True, timeout=60)
    assert proc.returncode in (0, 1), proc.stderr
    assert "host.shm-size" in proc.stdout
