"""`distdoctor hang --hosts` over a real sshd (in a network namespace) through ClusterShell:
the host answers with its snapshot and the stuck rank of a real 4-rank gloo job is named; a
host whose sshd is not there is named as not answering, within the bound."""

import os
import subprocess
import sys
import time

import pytest

from tests.conftest import distdoctor_argv, load_report
from tests.harness import apt
from tests.harness.hangjob import HangJob, pyspy_available
from tests.harness.netns import Namespaces
from tests.harness.ranks import clean_env, require_torch
from tests.harness.runprefix import RUN
from tests.harness.sshd import SshLab
from tests.integration.hang.test_live_torchrun import findings

NET = RUN.subnet("hang.ssh", 0)


@pytest.fixture(scope="module")
def ssh_lab(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("network namespaces and sshd's private /run need root")
    apt.ensure("iproute2", "util-linux")
    base = tmp_path_factory.mktemp("hg-sshd")
    ns = Namespaces("hg")
    lab = SshLab(base, ns)
    try:
        lab.start_netns_host("a", f"{NET}.2", f"{NET}.1")
        with open(lab.path("known_hosts"), "w") as fh:
            fh.write(f"{NET}.2 {lab.public_key('host_key')}\n")
        with open(lab.path("ssh_config"), "w") as fh:
            fh.write(f"Host hga\n  HostName {NET}.2\nHost hgz\n  HostName {NET}.9\n")
            fh.write(f"Host *\n  User root\n  IdentityFile {lab.path('id_ed25519')}\n  IdentitiesOnly yes\n"
                     f"  IdentityAgent none\n  UserKnownHostsFile {lab.path('known_hosts')}\n  LogLevel ERROR\n"
                     "  ConnectTimeout 3\n")
        yield lab
    finally:
        lab.stop()
        ns.cleanup()


def test_hosts_over_ssh_name_the_stuck_rank(ssh_lab, tmp_path):
    require_torch()
    pyspy_available()
    with HangJob(tmp_path, "sleep") as job:
        job.wait_for(["stuck2", "waiting0", "waiting1", "waiting3"])
        pids = job.rank_pids()
        started = time.monotonic()
        proc = subprocess.run([*distdoctor_argv(), "hang", "--json", "--hosts", "hga,hgz", "--timeout", "12",
                               "--ssh-option=-F", f"--ssh-option={ssh_lab.path('ssh_config')}",
                               "--distdoctor", f"{sys.executable} -m distdoctor"],
                              env=clean_env(), capture_output=True, text=True, timeout=90)
        took = time.monotonic() - started
        report = load_report(proc.stdout)
        assert proc.returncode == 1, proc.stderr
        mine = [f for f in findings(report, "hang.wave") if f["evidence"].get("pid") == pids[2]]
        assert len(mine) == 1 and "is in load_batch at job.py:" in mine[0]["summary"], findings(report, "hang.wave")
        nodes = findings(report, "hang.nodes")
        assert [n["subject"] for n in nodes] == ["hgz"], nodes
        assert took < 20, took
        assert job.release() == 0
