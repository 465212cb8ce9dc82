"""A host behind NAT, for real: nodeb sits on a private network behind a router namespace that
masquerades its traffic (what Docker's bridge network does to a container). It reaches rank 0,
so the rendezvous works, but the address it advertises is not reachable from nodea. The mesh
names nodeb, both addresses, and host networking as the fix."""

from __future__ import annotations

import os
import time

import pytest

from tests.harness import apt
from tests.harness.netns import Namespaces
from tests.harness.ranks import Ranks, checks, rank_env, report, require_torch

TIMEOUT = 25
MARGIN = 8.0
N = os.getpid() % 200 + 20
OUTSIDE, INSIDE = f"10.137.{N}", f"10.137.{N + 1}"


@pytest.fixture
def natted():
    require_torch()
    apt.ensure("nftables")
    with Namespaces("lfn") as ns:
        for short in ("a", "r", "b"):
            ns.add(short)
        ns.veth("a", "eth0", "r", "ra")
        ns.veth("b", "eth0", "r", "rb")
        ns.run("a", ["ip", "addr", "add", f"{OUTSIDE}.1/24", "dev", "eth0"])
        ns.run("r", ["ip", "addr", "add", f"{OUTSIDE}.254/24", "dev", "ra"])
        ns.run("r", ["ip", "addr", "add", f"{INSIDE}.254/24", "dev", "rb"])
        ns.run("b", ["ip", "addr", "add", f"{INSIDE}.2/24", "dev", "eth0"])
        ns.run("b", ["ip", "route", "add", "default", "via", f"{INSIDE}.254"])
        ns.run("r", ["sysctl", "-qw", "net.ipv4.ip_forward=1"])
        for rule in (["add", "table", "ip", "nat"],
                     ["add", "chain", "ip", "nat", "post", "{ type nat hook postrouting priority 100 ; }"],
                     ["add", "rule", "ip", "nat", "post", "oifname", "ra", "masquerade"]):
            ns.run("r", ["nft", *rule])
        yield ns


def on(ns: Namespaces, short: str, name: str) -> list[str]:
    return ["ip", "netns", "exec", ns.name(short), "unshare", "--uts", "sh", "-c", f'hostname {name} && exec "$@"', "sh"]


def test_a_host_behind_nat_is_named_with_both_addresses_and_host_networking(natted):
    with Ranks() as ranks:
        for rank, (short, name) in enumerate((("a", "nodea"), ("b", "nodeb"))):
            env = rank_env(rank, 2, 29471, f"{OUTSIDE}.1", GLOO_SOCKET_IFNAME="eth0")
            ranks.start(["--timeout", str(TIMEOUT), "--mesh", *(["--json"] if rank == 0 else [])], env,
                        on(natted, short, name))
        (rc0, out0, err0), (rc1, _out1, err1) = ranks.finish(TIMEOUT + MARGIN)
        wall = time.monotonic() - ranks.started
    doc = report(out0)
    assert rc0 == 1 and wall < TIMEOUT + MARGIN, (err0, err1)
    mesh = checks(doc)["nccl-test.mesh"]
    [nat] = [f for f in mesh["findings"] if "behind NAT" in f["summary"]]
    assert nat["summary"].startswith(f"nodeb (rank 1) advertises {INSIDE}.2 but its connections arrive from "
                                     f"{OUTSIDE}.254"), nat["summary"]
    assert "--network=host" in nat["fix"] and "nodeb" in nat["fix"]
    assert not any("behind NAT" in f["summary"] and "nodea" in f["subject"] for f in mesh["findings"])
