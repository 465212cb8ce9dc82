"""IPv6 noise, one finding per cause (issue 25: "one IPv6 warning repeated four times"). A node
with several IPv6 addresses on its uplink and several interfaces that have only a link-local
address, each of which NCCL's socket transport would take: the reason is said once, naming
every such interface, and the uplink's extra addresses say nothing. Real namespaces."""

from __future__ import annotations

import subprocess

import pytest

from tests.conftest import REPO, distdoctor_argv, load_report
from tests.harness.netns import Namespaces
from tests.harness.runprefix import RUN

NET = RUN.subnet("net.ipv6")
LINK_LOCAL_ONLY = ("ens0", "ens0p", "ens1", "ens1p", "ens2", "ens2p")


@pytest.fixture
def node():
    with Namespaces("l6") as ns:
        ns.add("n")
        ns.add("sw")
        ns.veth("n", "enp1s0f0", "sw", "uplink")
        for argv in (["ip", "addr", "add", f"{NET}.5/24", "dev", "enp1s0f0"],
                     *(["ip", "-6", "addr", "add", f"fd74:{i}::5/64", "dev", "enp1s0f0", "nodad"] for i in range(3)),
                     ["ip", "route", "add", "default", "via", f"{NET}.1"]):
            ns.run("n", argv)
        ns.run("sw", ["ip", "addr", "add", f"{NET}.1/24", "dev", "uplink"])
        for i in range(3):
            ns.run("n", ["ip", "link", "add", f"ens{i}", "type", "veth", "peer", "name", f"ens{i}p"])
            ns.run("n", ["ip", "link", "set", f"ens{i}", "up"])
            ns.run("n", ["ip", "link", "set", f"ens{i}p", "up"])
        # link-local addresses appear after duplicate address detection
        ns.run("n", ["sh", "-c", "for i in $(seq 100); do [ $(ip -6 -o addr show scope link | wc -l) -ge 7 ] && exit 0; "
                                 "sleep 0.1; done; exit 1"])
        yield ns


def test_several_link_local_only_interfaces_are_one_finding_naming_all(node):
    env = ["PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/nonexistent", "LC_ALL=C", f"MASTER_ADDR={NET}.1"]
    run = ["ip", "netns", "exec", node.name("n"), "env", "-i", *env, *distdoctor_argv(), "check", "--only", "net"]
    proc = subprocess.run([*run, "--format", "json"], capture_output=True, text=True, timeout=60, cwd=REPO)
    doc = load_report(proc.stdout)
    nccl = {c["id"]: c for c in doc["checks"]}["net.nccl-socket-interface"]
    [finding] = [f for f in nccl["findings"] if f["status"] != "ok"]
    reason = "only an IPv6 link-local address"
    assert finding["summary"].count(reason) == 1, finding["summary"]
    assert all(name in finding["summary"] for name in LINK_LOCAL_ONLY), finding["summary"]
    # the uplink's three global IPv6 addresses are not a finding of their own
    assert "fd74" not in " ".join(f["summary"] for c in doc["checks"] for f in c["findings"] if f["status"] != "ok")
    console = subprocess.run(run, capture_output=True, text=True, timeout=60, cwd=REPO).stdout
    assert console.count(reason) <= 2, console  # the finding, and its line under "How to fix"
