"""Path MTU, for real: two "hosts" (network namespaces with their own hostnames) joined through a
third namespace that bridges them, every MTU set with `ip link set mtu`. Both hosts at 9000 with
the bridge's ports at 1500 is the jumbo-frame black hole: the handshake passes, a large transfer
stalls, and no ICMP says why. The mesh must measure the path, name the pair and the size that
passes, and print `ip link set dev IF mtu N` for the ends that must change; those lines, run as
printed on those nodes, must make the re-run pass."""

from __future__ import annotations

import os
import time

import pytest

from tests.harness import apt
from tests.harness.fixapply import assert_cleared, run_on_nodes
from tests.harness.netns import Namespaces
from tests.harness.ranks import Ranks, checks, rank_env, report, require_torch, statuses

TIMEOUT = 25
MARGIN = 8.0
SUBNET = f"10.137.{os.getpid() % 200 + 20}"
NODES = {"nodea": "a", "nodeb": "b"}


@pytest.fixture
def bridged():
    """nodea (eth0, SUBNET.1) and nodeb (eth0, SUBNET.2) on bridge br0 in namespace sw."""
    require_torch()
    with Namespaces("lf") as ns:
        ns.add("sw")
        ns.run("sw", ["ip", "link", "add", "br0", "type", "bridge"])
        ns.run("sw", ["ip", "link", "set", "br0", "up"])
        for i, (node, short) in enumerate(NODES.items()):
            ns.add(short)
            ns.veth(short, "eth0", "sw", f"p{i}")
            ns.run("sw", ["ip", "link", "set", f"p{i}", "master", "br0"])
            ns.run(short, ["ip", "addr", "add", f"{SUBNET}.{i + 1}/24", "dev", "eth0"])
        yield ns


def mtus(ns: Namespaces, hosts: int, switch: int) -> None:
    apt.ensure("ethtool")
    for i, short in enumerate(NODES.values()):
        ns.run("sw", ["ip", "link", "set", "dev", f"p{i}", "mtu", str(switch)])
        ns.run(short, ["ip", "link", "set", "dev", "eth0", "mtu", str(hosts)])
        # A veth hands 64 KB segmentation-offload packets to its peer unchecked; a real NIC cuts
        # them to the wire's MTU first. With the offloads off the hosts send MTU-sized frames,
        # and the 1500 ports drop the larger ones as a switch does.
        ns.run(short, ["ethtool", "-K", "eth0", "tso", "off", "gso", "off"])


def on(ns: Namespaces, node: str) -> list[str]:
    return ["ip", "netns", "exec", ns.name(NODES[node]), "unshare", "--uts", "sh", "-c",
            f'hostname {node} && exec "$@"', "sh"]


def run_pair(ns: Namespaces, port: int):
    with Ranks() as ranks:
        for rank, node in enumerate(NODES):
            env = rank_env(rank, 2, port, f"{SUBNET}.1", GLOO_SOCKET_IFNAME="eth0")
            ranks.start(["--timeout", str(TIMEOUT), *(["--json"] if rank == 0 else [])], env, on(ns, node))
        (rc0, out0, err0), (rc1, _out1, err1) = ranks.finish(TIMEOUT + MARGIN)
        wall = time.monotonic() - ranks.started
    return rc0, rc1, report(out0), err0 + err1, wall


def test_jumbo_hosts_behind_a_1500_hop_are_named_with_the_size_that_passes_and_the_fix_clears_it(bridged):
    mtus(bridged, hosts=9000, switch=1500)
    rc0, rc1, doc, errs, wall = run_pair(bridged, 29461)
    assert rc0 == 1 and wall < TIMEOUT + MARGIN, errs
    mesh = checks(doc)["nccl-test.mesh"]
    [found] = [f for f in mesh["findings"] if f["status"] == "fail"]
    assert "the path carries packets of 1500 bytes, not 9000" in found["summary"], mesh["findings"]
    assert "nodea" in found["summary"] and "nodeb" in found["summary"]
    assert found["evidence"]["path_mtu"] == 1500
    fix = [line for line in found["fix"].splitlines() if not line.startswith("# lasts until a reboot")]
    # Both ends send 9000-byte frames the hop drops: both come down; the hop is the alternative.
    assert fix[:2] == ["ssh nodea ip link set dev eth0 mtu 1500", "ssh nodeb ip link set dev eth0 mtu 1500"], fix
    assert fix[2].startswith("# or raise every switch port and hop between nodea and nodeb to 9000")

    run_on_nodes(found["fix"], lambda node: ["ip", "netns", "exec", bridged.name(NODES[node])], here="nodea")
    rc0, rc1, again, errs, _ = run_pair(bridged, 29462)
    assert (rc0, rc1) == (0, 0), (errs, [c for c in again["checks"] if c["status"] != "ok"])
    assert statuses(again)["nccl-test.mesh"] == "ok"
    assert_cleared(doc, again, [found["fix"]])


def test_a_healthy_jumbo_path_raises_nothing(bridged):
    """9000 everywhere, the bridge included: transfers pass, no MTU finding (no false alarm)."""
    mtus(bridged, hosts=9000, switch=9000)
    bridged.run("sw", ["ip", "link", "set", "dev", "br0", "mtu", "9000"])
    rc0, rc1, doc, errs, _ = run_pair(bridged, 29463)
    assert (rc0, rc1) == (0, 0), (errs, [c for c in doc["checks"] if c["status"] != "ok"])
    assert statuses(doc)["nccl-test.mesh"] == "ok"
