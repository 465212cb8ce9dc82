"""Interfaces judged by reachability, in real network namespaces (addresses in two /24s of the
run, LINK and NAT: tests/harness/runprefix.py; namespaces <run tag>qa*):

    peer (the job's other node)  eth0 LINK.2/24
      | veth
    node  eth0 LINK.1/24 (a veth, on-link with the peer)
          qabr0 NAT.1/24, a bridge; nftables MASQUERADEs NAT.0/24 out of eth0
      | veth qav1 (port of qabr0)
    ctr   eth0 NAT.2/24, default via NAT.1: a container on a NATed bridge

The test first proves the topology does what it claims (ctr reaches the peer through the NAT,
the peer cannot reach ctr), then asks `distdoctor check` in each namespace."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import distdoctor_argv, load_report
from tests.harness import apt
from tests.harness.netns import Namespaces
from tests.harness.runprefix import RUN, free_port

LINK, NAT = RUN.subnet("net.reachability", 0), RUN.subnet("net.reachability", 1)


CONNECT = ("import socket, sys\n"
           "try:\n"
           "    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2).close(); print('ok')\n"
           "except OSError as exc:\n"
           "    print('fail', exc)\n")



@pytest.fixture(scope="module")
def lab():
    apt.ensure("iproute2", "nftables")
    with Namespaces("qa") as ns:
        for short in ("peer", "node", "ctr"):
            ns.add(short)
        ns.veth("node", "eth0", "peer", "eth0")
        ns.run("node", ["ip", "addr", "add", f"{LINK}.1/24", "dev", "eth0"])
        ns.run("peer", ["ip", "addr", "add", f"{LINK}.2/24", "dev", "eth0"])
        ns.run("node", ["ip", "link", "add", "qabr0", "type", "bridge"])
        ns.run("node", ["ip", "addr", "add", f"{NAT}.1/24", "dev", "qabr0"])
        ns.run("node", ["ip", "link", "set", "qabr0", "up"])
        ns.veth("node", "qav1", "ctr", "eth0")
        ns.run("node", ["ip", "link", "set", "qav1", "master", "qabr0"])
        ns.run("ctr", ["ip", "addr", "add", f"{NAT}.2/24", "dev", "eth0"])
        ns.run("ctr", ["ip", "route", "add", "default", "via", f"{NAT}.1"])
        ns.run("node", ["sysctl", "-qw", "net.ipv4.ip_forward=1"])
        ruleset = ("table ip qanat {\n chain post {\n  type nat hook postrouting priority 100;\n"
                   f"  ip saddr {NAT}.0/24 oifname \"eth0\" masquerade\n }}\n}}\n")
        ns.run("node", ["nft", "-f", "-"], input=ruleset)
        yield ns


def _listen(ns: Namespaces, short: str, address: str, port: int) -> subprocess.Popen:
    code = ("import socket, sys\ns = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
            f"s.bind(({address!r}, {port})); s.listen(4); print('up', flush=True)\n"
            "s.settimeout(20)\ntry:\n    while True:\n        s.accept()[0].close()\nexcept OSError:\n    pass\n")
    proc = subprocess.Popen(["ip", "netns", "exec", ns.name(short), sys.executable, "-c", code],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "up"
    return proc


def _connect(ns: Namespaces, short: str, address: str, port: int) -> str:
    return ns.run(short, [sys.executable, "-c", CONNECT, address, str(port)], check=False).stdout.strip()


def _check(ns: Namespaces, short: str, env: dict, tmp_path) -> dict:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "NCCL_", "GLOO_", "MASTER_"))}
    full.update(env, XDG_CONFIG_HOME=str(tmp_path), HOME=str(tmp_path))
    proc = ns.run(short, [*distdoctor_argv(), "check", "--only", "net.nccl-socket-interface", "--format", "json"],
                  check=False, env=full, timeout=60)
    [run] = load_report(proc.stdout)["checks"]
    return run


def test_the_topology_really_nats(lab):
    port = free_port("127.0.0.1")
    listener = _listen(lab, "peer", f"{LINK}.2", port)
    try:
        assert _connect(lab, "ctr", f"{LINK}.2", port) == "ok"  # out through the MASQUERADE
    finally:
        listener.kill()
        listener.wait(timeout=10)
    listener = _listen(lab, "ctr", f"{NAT}.2", port)
    try:
        assert _connect(lab, "peer", f"{NAT}.2", port).startswith("fail")  # and never back in
    finally:
        listener.kill()
        listener.wait(timeout=10)


def test_a_veth_on_link_with_the_jobs_other_node_is_fine(lab, tmp_path):
    run = _check(lab, "node", {"MASTER_ADDR": f"{LINK}.2", "NCCL_SOCKET_IFNAME": "=eth0"}, tmp_path)
    [finding] = run["findings"]
    assert finding["status"] == "ok", finding
    assert f"eth0 {LINK}.1" in finding["summary"] and "veth" in finding["summary"]
    assert finding["evidence"]["peers"][0]["dev"] == "eth0"


def test_a_container_on_a_natted_bridge_warns_with_host_networking(lab, tmp_path):
    run = _check(lab, "ctr", {"MASTER_ADDR": f"{LINK}.2"}, tmp_path)
    finding = [f for f in run["findings"] if f["subject"] != "interfaces"][-1]
    assert finding["status"] == "warn", finding
    assert f"eth0:{NAT}.2" in finding["summary"] and f"gateway {NAT}.1" in finding["summary"]
    assert finding["fix"].startswith("docker run --network=host ...")
    assert "hostNetwork: true" in finding["fix"] and "NCCL_SOCKET_IFNAME=" not in finding["fix"]
    assert [(p["address"], p["dev"]) for p in finding["evidence"]["peers"]] == [(f"{LINK}.2", "eth0")]


def test_the_nat_bridge_seen_from_the_node_is_not_advertised(lab, tmp_path):
    run = _check(lab, "node", {"MASTER_ADDR": f"{LINK}.2", "NCCL_SOCKET_IFNAME": "=qabr0"}, tmp_path)
    finding = [f for f in run["findings"] if f["subject"] != "interfaces"][-1]
    assert finding["status"] == "warn" and f"qabr0:{NAT}.1" in finding["summary"], finding
    # on the node itself an interface the peers can reach exists: the fix names it
    assert finding["fix"].startswith("export NCCL_SOCKET_IFNAME='=eth0'")
