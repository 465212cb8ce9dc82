"""`distdoctor fleet --hosts` over real sshd (two hosts in network namespaces) through
ClusterShell, with host-key checking on: known hosts answer, an unknown host key is named."""

import os
import subprocess
import sys

import pytest

from tests.conftest import distdoctor_argv, load_report
from tests.harness import apt
from tests.harness.netns import Namespaces
from tests.harness.runprefix import RUN
from tests.harness.sshd import SshLab

# name -> (address in its namespace, the root namespace's end), one /24 of the run each
HOSTS = {name: (f"{RUN.subnet('cluster.fleet_ssh', i)}.2", f"{RUN.subnet('cluster.fleet_ssh', i)}.1")
         for i, name in enumerate(("qba", "qbb", "qbc"))}


@pytest.fixture(scope="module")
def ssh_lab(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("network namespaces and sshd's private /run need root")
    apt.ensure("iproute2", "util-linux")
    base = tmp_path_factory.mktemp("qb-sshd")
    ns = Namespaces("qb")
    lab = SshLab(base, ns)
    try:
        for short, (ns_ip, root_ip) in HOSTS.items():
            lab.start_netns_host(short[-1], ns_ip, root_ip)
        key = lab.public_key("host_key")
        with open(lab.path("known_hosts"), "w") as fh:  # qbc is left out: its key is unknown
            for name in ("qba", "qbb"):
                fh.write(f"{HOSTS[name][0]} {key}\n")
        with open(lab.path("ssh_config"), "w") as fh:
            for name, (ns_ip, _root) in HOSTS.items():
                fh.write(f"Host {name}\n  HostName {ns_ip}\n")
            fh.write(f"Host *\n  User root\n  IdentityFile {lab.path('id_ed25519')}\n  IdentitiesOnly yes\n"
                     f"  IdentityAgent none\n  UserKnownHostsFile {lab.path('known_hosts')}\n  LogLevel ERROR\n")
        yield lab
    finally:
        lab.stop()
        ns.cleanup()


def test_fleet_over_ssh_gathers_known_hosts_and_names_the_unknown_key(ssh_lab):
    dd = f"{sys.executable} -m distdoctor"
    out = subprocess.run(distdoctor_argv() + ["fleet", "--hosts", "qba,qbb,qbc", "--fanout", "2", "--timeout", "30",
                                              "--ssh-option=-F", f"--ssh-option={ssh_lab.path('ssh_config')}",
                                              "--distdoctor", dd, "--json"],
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.stdout, out.stderr
    doc = load_report(out.stdout)
    assert doc["cluster"]["answered"] == 2, (doc["cluster"], out.stderr)
    assert sorted(n for n, v in doc["nodes"].items() if v["status"] != "missing") == ["qba", "qbb"]
    assert doc["cluster"]["missing"] == {"qbc": "qbc: ssh failed (Host key verification failed.)"}
    assert doc["context"]["description"] == "fleet: ssh to 3 hosts"
