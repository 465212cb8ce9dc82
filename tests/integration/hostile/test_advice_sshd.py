"""The changed-host-key fix, pasted as printed, against a real sshd."""

import os
import subprocess

import pytest

from distdoctor.checks.reach import _fix
from distdoctor.facts import reach as R
from distdoctor.parsers import ssh as S


@pytest.mark.slow
def test_the_changed_host_key_fix_works_as_printed_against_a_real_sshd(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("sshd's private /run needs root")
    from tests.harness.sshd import SshLab

    (tmp_path / "lab").mkdir()
    lab = SshLab(tmp_path / "lab")
    try:
        port = lab.start_loopback()
        home = tmp_path / "home"
        (home / ".ssh").mkdir(parents=True)
        known = home / ".ssh" / "known_hosts"
        known.write_text(f"[127.0.0.1]:{port} {lab.public_key('other_host_key')}\n")  # the old, now wrong key
        result = R.ProbeResult("ssh", S.HOSTKEY_CHANGED, "host key changed",
                               data={"known_hosts_file": str(known), "known_hosts_line": 1})
        _explanation, fix = _fix(R.SSH, S.HOSTKEY_CHANGED, "127.0.0.1", result, R.ProbeSettings(ssh_port=port))
        assert "127.0.0.1.key" not in fix and "> /" not in fix
        env = {"HOME": str(home), "PATH": os.environ["PATH"]}
        ran = subprocess.run(["bash", "-euo", "pipefail", "-c", fix], capture_output=True, text=True,
                             timeout=60, env=env, check=False)
        assert ran.returncode == 0, ran.stderr
        fingerprint = subprocess.run(["ssh-keygen", "-lf", lab.path("host_key.pub")], capture_output=True,
                                     text=True, timeout=30, check=True).stdout.split()[1]
        assert fingerprint in ran.stdout  # what the user compares is the real key's fingerprint
        assert lab.public_key("other_host_key").split()[1] not in known.read_text()
        login = subprocess.run(["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
                                "-o", f"UserKnownHostsFile={known}", "-o", "IdentitiesOnly=yes",
                                "-i", lab.path("id_ed25519"), "-p", str(port), "root@127.0.0.1", "true"],
                               capture_output=True, text=True, timeout=60, env=env, check=False)
        assert login.returncode == 0, login.stderr
    finally:
        lab.stop()
