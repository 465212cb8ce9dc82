"""`--hosts localhost,...` is a mistake in the host list, not in /etc/hosts: the fix must never
tell the user to remap localhost (that breaks the node)."""

import subprocess

from tests.conftest import distdoctor_argv, load_report


def test_localhost_in_a_host_list_is_fixed_in_the_list_not_in_etc_hosts():
    proc = subprocess.run([*distdoctor_argv(), "check", "--only", "reach.hosts", "--hosts", "localhost,127.0.0.1",
                           "--json"], capture_output=True, text=True, timeout=60)
    doc = load_report(proc.stdout)
    [run] = doc["checks"]
    names = [f for f in run["findings"] if "loopback" in f["summary"]]
    assert names, run["findings"]
    for finding in names:
        assert "/etc/hosts" not in finding["fix"] and "/etc/hosts" not in finding["explanation"]
        assert "instead of" in finding["fix"] and "host list" in finding["fix"]
